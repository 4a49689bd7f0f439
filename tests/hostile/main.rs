//! The hostile-peer suite, over the in-memory wire: a bench server (node B, as `iwarp
//! serve` runs it: core and sessions on one thread) under attack from a hostile host on
//! node A's link, while a well-behaved client on node A runs a verified benchmark.
//!
//! Every case checks: the right error, Terminate or reset reaches the attacker; our own
//! accounting stays under its caps while the attack lasts (connections, half-open,
//! startups, TIME-WAIT, session memory) and the process's resident set stays under a
//! stated bound; the connection table returns to empty afterwards; and a good client
//! started during the attack completes a verified run.
//!
//! `scripts/test.sh` runs it in a release build (`cargo test --release --test hostile --
//! --include-ignored`); the two largest cases are skipped in debug builds, where the
//! victim is too slow for the startup limits they test.

mod attacker;

#[path = "../common/rss.rs"]
mod rss;

use std::net::SocketAddrV4;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use attacker::{Attacker, Mpa, Tap, TapPort, ATTACKER};
use control::embedded::{ADDR_A, ADDR_B, BENCH_PORT};
use control::verbs::{Device, ResponderConfig};
use dataplane::lcore::{Core, CoreGauges, CoreStats};
use dataplane::limits::Limits;
use dataplane::port::mem::{self, WireConfig};
use dataplane::port::Port;
use iwarp::bench::server::{Budget, Server};
use iwarp::bench::session::{self, Hello, RemoteBuffer};
use iwarp::bench::{BenchOptions, Length, Test};
use proto::startup::InitiatorConfig;
use wire::rdmap;

/// What the server thread shows of itself.
#[derive(Debug, Default, Clone, Copy)]
struct Snap {
    gauges: CoreGauges,
    stats: CoreStats,
    sessions: usize,
    /// Sessions past their startup (the ones the server's session budget counts).
    running: usize,
    memory: u64,
    admitted: u64,
    rejected: u64,
    /// The most seen of each gauge while the snapshot was taken.
    max_connections: usize,
    max_half_open: usize,
    max_startup: usize,
    max_memory: u64,
    /// When the victim's thread took it.
    taken: Option<Instant>,
}

/// The caps the victim runs with: defaults where the test can afford them, short
/// timeouts so that a case takes seconds.
fn limits() -> Limits {
    Limits {
        syn_backlog: 256,
        startup_timeout: Duration::from_secs(3),
        user_timeout: Duration::from_secs(1),
        linger: Duration::from_millis(500),
        ..Limits::default()
    }
}

fn responder() -> ResponderConfig {
    ResponderConfig {
        request_timeout: Some(Duration::from_secs(2)),
        rtr_timeout: Some(Duration::from_secs(2)),
        first_fpdu_timeout: Some(Duration::from_secs(2)),
        ..ResponderConfig::default()
    }
}

const SESSION_BUDGET: u64 = 64 << 20;

type ClientRun = (
    Core,
    Result<iwarp::bench::ClientOutcome, iwarp::bench::BenchError>,
);

/// One case at a time: the resident-set bounds are the process's, and the cases' threads
/// would otherwise share the two CPUs.
static SERIAL: Mutex<()> = Mutex::new(());

struct Lab {
    _serial: std::sync::MutexGuard<'static, ()>,
    attacker: Attacker,
    /// The splice between node A's port and the attacker.
    tap: Arc<Tap>,
    a: Device,
    core_a: Option<Core>,
    /// A good client running on node A's core (which it then holds).
    client: Option<JoinHandle<ClientRun>>,
    /// Its outcome, once it finished.
    client_done: Option<Result<iwarp::bench::ClientOutcome, iwarp::bench::BenchError>>,
    stop: Arc<AtomicBool>,
    snap: Arc<Mutex<Snap>>,
    server: Option<JoinHandle<(Core, Server)>>,
    rss_start: u64,
    rss_max: u64,
}

fn node(port: Box<dyn Port>, addr: std::net::Ipv4Addr, limits: Limits) -> (Device, Core) {
    control::embedded::node(port, addr, control::embedded::tcp_config(1500), limits)
}

fn rss() -> u64 {
    rss::rss_of(None)
}

impl Lab {
    fn new(limits: Limits) -> Lab {
        Lab::with(limits, responder())
    }

    fn with(limits: Limits, responder: ResponderConfig) -> Lab {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        let (pa, pb) = mem::link(WireConfig::default(), WireConfig::default());
        let tap = Arc::new(Tap::default());
        let tapped = TapPort {
            inner: Box::new(pa),
            tap: tap.clone(),
        };
        let (a, core_a) = node(Box::new(tapped), ADDR_A, Limits::default());
        let (b, mut core_b) = node(Box::new(pb), ADDR_B, limits);
        let listener = b.listen(BENCH_PORT, responder).expect("listen");
        let stop = Arc::new(AtomicBool::new(false));
        let snap = Arc::new(Mutex::new(Snap::default()));
        let (s2, n2) = (stop.clone(), snap.clone());
        let server = std::thread::Builder::new()
            .name("victim".into())
            .spawn(move || {
                let budget = Budget {
                    session: SESSION_BUDGET,
                    total: 4 * SESSION_BUDGET,
                    sessions: 8,
                    pending_per_peer: 4,
                };
                let mut server = Server::new(b, vec![listener], budget);
                let mut last = Instant::now();
                while !s2.load(Ordering::Relaxed) {
                    core_b.poll();
                    server.step();
                    while server.take_finished().is_some() {}
                    server.last_rejections.clear();
                    if last.elapsed() > Duration::from_millis(1) {
                        last = Instant::now();
                        let g = core_b.gauges();
                        let (admitted, rejected) = server.admissions();
                        let mut s = n2.lock().unwrap();
                        *s = Snap {
                            gauges: g,
                            stats: core_b.stats(),
                            sessions: server.active(),
                            running: server.running(),
                            memory: server.memory_in_use(),
                            admitted,
                            rejected,
                            max_connections: s.max_connections.max(g.connections),
                            max_half_open: s.max_half_open.max(g.half_open),
                            max_startup: s.max_startup.max(g.startup),
                            max_memory: s.max_memory.max(server.memory_in_use()),
                            taken: Some(Instant::now()),
                        };
                    }
                }
                (core_b, server)
            })
            .expect("server thread");
        let r = rss();
        Lab {
            _serial: serial,
            attacker: Attacker::new(tap.clone()),
            tap,
            a,
            core_a: Some(core_a),
            client: None,
            client_done: None,
            stop,
            snap,
            server: Some(server),
            rss_start: r,
            rss_max: r,
        }
    }

    /// The victim's state as of now: waits (stepping node A and the attacker) for a
    /// snapshot taken after the call, so that a condition on it never passes on stale
    /// figures.
    fn snap(&mut self) -> Snap {
        let asked = Instant::now();
        loop {
            let s = *self.snap.lock().unwrap();
            if s.taken.is_some_and(|t| t > asked) {
                return s;
            }
            assert!(
                asked.elapsed() < Duration::from_secs(10),
                "the victim's thread stopped taking snapshots"
            );
            self.step();
        }
    }

    fn server_addr() -> SocketAddrV4 {
        SocketAddrV4::new(ADDR_B, BENCH_PORT)
    }

    /// One round of node A's core (when no client holds it) and the attacker.
    fn step(&mut self) {
        if self.client.as_ref().is_some_and(|h| h.is_finished()) {
            let (core, r) = self.client.take().unwrap().join().expect("client thread");
            self.core_a = Some(core);
            self.client_done = Some(r);
        }
        if let Some(c) = self.core_a.as_mut() {
            c.poll();
        }
        self.attacker.poll();
        self.rss_max = self.rss_max.max(rss());
    }

    /// Starts a good client's verified write-bw run of `iters` 4 KiB messages on node A,
    /// in the background.
    fn start_client(&mut self, iters: u64) {
        let core = self.core_a.take().expect("core A held");
        let dev = self.a.clone();
        let o = BenchOptions {
            test: Test::WriteBw,
            sizes: vec![4096],
            length: Length::Iterations(iters),
            tx_depth: 32,
            verify: true,
            ..BenchOptions::default()
        };
        self.client = Some(std::thread::spawn(move || {
            iwarp::bench::run_client(
                &dev,
                core,
                &o,
                Lab::server_addr(),
                InitiatorConfig::default(),
            )
        }));
    }

    /// Waits for the background client; checks every octet of its run was verified.
    fn client_verified(&mut self, iters: u64) -> u64 {
        self.until("the good client", Duration::from_secs(120), |l| {
            l.client_done.is_some()
        });
        let c = self
            .client_done
            .take()
            .unwrap()
            .unwrap_or_else(|e| panic!("the good client failed during the attack: {e}"));
        let verified = c.server.verified + c.client_verified;
        assert_eq!(c.server.errors + c.client_errors, 0, "wrong octets");
        assert_eq!(verified, c.expected_verified);
        assert_eq!(verified, iters * 4096);
        verified
    }

    /// Runs rounds for `d`.
    fn run_for(&mut self, d: Duration) {
        let end = Instant::now() + d;
        while Instant::now() < end {
            self.step();
        }
    }

    /// Runs rounds until `f` holds; panics after `within`.
    fn until(&mut self, what: &str, within: Duration, mut f: impl FnMut(&mut Lab) -> bool) {
        let end = Instant::now() + within;
        loop {
            self.step();
            if f(self) {
                return;
            }
            assert!(
                Instant::now() < end,
                "timed out waiting for {what}: {:?}",
                self.snap()
            );
        }
    }

    /// A good client's verified write-bw run on node A, while the attacker keeps going on
    /// this thread. Returns the octets verified (all of them, or the test fails).
    fn good_client(&mut self) -> u64 {
        self.start_client(2000);
        self.client_verified(2000)
    }

    /// Waits until the victim holds no connection and no session (the attacker's are all
    /// gone: reset, timed out, or closed), and checks the resident set stayed bounded.
    fn drained(&mut self, within: Duration, rss_bound: u64) -> Snap {
        self.until("the victim's table to empty", within, |l| {
            let s = l.snap();
            s.gauges.connections == 0 && s.sessions == 0 && s.gauges.half_open == 0
        });
        let grew = self.rss_max.saturating_sub(self.rss_start);
        assert!(
            grew < rss_bound,
            "resident set grew {} MiB (bound {} MiB)",
            grew >> 20,
            rss_bound >> 20
        );
        eprintln!(
            "resident set: {} MiB at start, {} MiB at most (+{} MiB)",
            self.rss_start >> 20,
            self.rss_max >> 20,
            grew >> 20
        );
        self.snap()
    }

    fn finish(mut self) -> (Core, Server) {
        self.stop.store(true, Ordering::Relaxed);
        self.server.take().expect("running").join().expect("server")
    }

    /// Opens `n` connections, a few hundred at a time (as fast as the wire takes them),
    /// and waits until all are established.
    fn open(&mut self, n: usize) -> Vec<proto::tcp::FourTuple> {
        let mut ts = Vec::with_capacity(n);
        while ts.len() < n {
            let batch = (n - ts.len()).min(200);
            for _ in 0..batch {
                ts.push(self.attacker.connect(Lab::server_addr()));
            }
            let want = ts.len();
            self.until("connections established", Duration::from_secs(30), |l| {
                l.attacker.established() >= want
            });
        }
        ts
    }

    /// Opens a connection and takes it to Full Operation as an MPA Initiator with
    /// `hello`, and sends the first message; returns it and the server's buffer from the
    /// Reply.
    fn session(&mut self, hello: &Hello) -> (proto::tcp::FourTuple, RemoteBuffer) {
        let t = try_session(self, hello, true).unwrap_or_else(|why| panic!("startup: {why}"));
        let Mpa::Fpdu { established, .. } = &self.attacker.peers[&t].mpa else {
            unreachable!()
        };
        let buf = session::decode_buffer(&established.reply.private_data).expect("bench reply");
        (t, buf)
    }
}

fn hello(test: Test) -> Hello {
    Hello {
        test,
        sizes: vec![4096],
        length: Length::Iterations(1000),
        tx_depth: 16,
        verify: false,
        client_sink: None,
    }
}

/// A tagged RDMA Write ULPDU of `len` octets to `stag`/`to`.
fn write_ulpdu(stag: u32, to: u64, len: usize) -> Vec<u8> {
    let h = rdmap::tagged_header(rdmap::Opcode::RdmaWrite, stag, to, true).unwrap();
    let mut u = Vec::new();
    h.append_to(&mut u);
    u.extend(std::iter::repeat_n(0xEE, len));
    u
}

/// The single Terminate a connection got, with its layer/type/code.
fn term_of(l: &Lab, t: &proto::tcp::FourTuple) -> (u8, u8, u8) {
    let p = &l.attacker.peers[t];
    assert_eq!(p.terms.len(), 1, "Terminates: {:?}", p.terms);
    p.terms[0].error.triple()
}

const MIB: u64 = 1 << 20;

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "20,000 SYNs or 10,000 connections: run with --release (scripts/test.sh does)"
)]
fn syn_flood_of_20000_gets_cookies_and_a_good_client_runs() {
    let mut l = Lab::new(limits());
    // 20,000 SYNs (a tenth from spoofed on-link addresses nobody answers ARP for), in
    // bursts, with the good client in the middle of the flood.
    for k in 0..10_000u32 {
        let src = if k % 10 == 0 {
            smoltcp::wire::Ipv4Address::new(10, 77, 0, 100 + (k % 50) as u8)
        } else {
            ATTACKER
        };
        l.attacker.syn(src, Lab::server_addr());
        if k % 16 == 0 {
            l.step();
        }
    }
    l.run_for(Duration::from_millis(50));
    let verified = l.good_client();
    for k in 0..10_000u32 {
        l.attacker.syn(ATTACKER, Lab::server_addr());
        if k % 16 == 0 {
            l.step();
        }
    }
    l.run_for(Duration::from_millis(200));
    let s = l.snap();
    eprintln!(
        "during the flood: {s:?}, attacker saw {:?}",
        l.attacker.seen
    );
    assert!(s.max_half_open <= 256, "half-open above the backlog: {s:?}");
    // How many SYNs reach the victim depends on timing: the attacker's own stack refuses
    // some (its Net::send_tcp fails, during the flood 1k to 5k of 20k, both in this
    // session's code and in 4f08cce's), and a full wire drops its frames (both counted); under load the victim's thread may still be working through them.
    // Every one from the attacker's own address that arrives beyond the backlog gets a
    // cookie within a few seconds (the 1,000 from spoofed addresses, which nobody answers
    // ARP for, may get none), and the attacker sees them.
    let dropped = l.tap.dropped.load(std::sync::atomic::Ordering::Relaxed);
    let delivered = l.attacker.syns_sent.saturating_sub(dropped);
    eprintln!(
        "SYNs: {} sent of 20000, {delivered} delivered ({dropped} dropped by the full wire)",
        l.attacker.syns_sent
    );
    assert!(
        delivered >= 5_000,
        "the flood hardly reached the victim: {dropped} dropped"
    );
    l.until(
        "a cookie for every SYN beyond the backlog",
        Duration::from_secs(10),
        |l| {
            l.snap().stats.syn_cookies_sent + 256 + 1_000 + 64 >= delivered
                && l.attacker.seen.syn_acks + 1_000 + 64 >= l.snap().stats.syn_cookies_sent
        },
    );
    // The half-open connections go at the startup timeout.
    let s = l.drained(Duration::from_secs(10), 256 * MIB);
    assert!(s.stats.startup_timeouts >= 200, "{s:?}");
    assert_eq!(verified, 2000 * 4096);
    let (core, _) = l.finish();
    assert_eq!(core.connections(), 0);
}

#[test]
#[cfg_attr(
    debug_assertions,
    ignore = "20,000 SYNs or 10,000 connections: run with --release (scripts/test.sh does)"
)]
fn ten_thousand_stalled_connections_are_reaped() {
    let mut l = Lab::new(limits());
    // 10,000 connections: a third stop after the handshake, a third after half a
    // Request, a third after a whole Request.
    let ts = l.open(9999);
    let request = {
        let cfg = InitiatorConfig {
            private_data: hello(Test::WriteBw).encode().unwrap(),
            ..InitiatorConfig::default()
        };
        cfg.request()
            .unwrap()
            .to_bytes(proto::startup::Dialect::Rfc6581)
            .unwrap()
    };
    for (i, t) in ts.iter().enumerate() {
        match i % 3 {
            0 => {}
            1 => {
                l.attacker
                    .send_raw(*t, request[..request.len() / 2].to_vec());
            }
            _ => {
                l.attacker.send_raw(*t, request.clone());
            }
        }
        if i % 256 == 0 {
            l.step();
        }
    }
    l.run_for(Duration::from_millis(300));
    let s = l.snap();
    eprintln!("stalled: {s:?}");
    assert!(s.max_connections >= 9000, "{s:?}");
    let verified = l.good_client();
    // Every stalled startup is reset by the startup limits.
    let s = l.drained(Duration::from_secs(15), 768 * MIB);
    eprintln!("after: {s:?}");
    // The victim's table is empty once it has sent its last resets; those may still be
    // on the wire (its core runs on another thread): the attacker gets a moment to read
    // them.
    let all_reset = |l: &mut Lab| {
        l.attacker.peers.values().all(|p| {
            p.reset
                || matches!(
                    p.tcp.state(),
                    proto::tcp::State::Closed | proto::tcp::State::TimeWait
                )
        })
    };
    l.until(
        "every stalled peer to see its reset",
        Duration::from_secs(5),
        all_reset,
    );
    // The full Requests were well-formed hellos: accepted, then their sessions failed
    // waiting for the first FPDU (first_fpdu_timeout) or were refused for lack of room
    // (8 sessions); none holds memory now.
    assert_eq!(s.memory, 0);
    assert!(s.max_memory <= 4 * SESSION_BUDGET);
    assert_eq!(verified, 2000 * 4096);
    l.finish();
}

#[test]
fn request_sent_one_octet_per_second_times_out() {
    let mut l = Lab::new(limits());
    let t = l.open(1)[0];
    let request = InitiatorConfig::default()
        .request()
        .unwrap()
        .to_bytes(proto::startup::Dialect::Rfc6581)
        .unwrap();
    let start = Instant::now();
    let mut sent = 0;
    let mut next = Instant::now();
    while !l.attacker.peers[&t].reset
        && !l.attacker.peers[&t]
            .events
            .contains(&proto::tcp::Event::PeerClosed)
    {
        if Instant::now() >= next && sent < request.len() {
            l.attacker.send_raw(t, request[sent..sent + 1].to_vec());
            sent += 1;
            next += Duration::from_secs(1);
        }
        l.step();
        assert!(start.elapsed() < Duration::from_secs(10), "never closed");
    }
    // The Request wait (2 s here; 5 s by default) ended it, long before the Request did.
    let took = start.elapsed();
    assert!(
        sent < request.len(),
        "sent {sent} of {} octets",
        request.len()
    );
    assert!(
        took >= Duration::from_secs(2) && took < Duration::from_secs(4),
        "{took:?}"
    );
    let verified = l.good_client();
    l.drained(Duration::from_secs(5), 128 * MIB);
    assert_eq!(verified, 2000 * 4096);
    l.finish();
}

#[test]
fn peer_that_keeps_streaming_after_a_failed_startup_is_cut_off() {
    let mut l = Lab::new(limits());
    let (t, _) = l.session(&hello(Test::WriteBw));
    // An FPDU with a bad CRC, then garbage at full speed: the startup failed (RFC 5044 8:
    // no Terminate before a valid FPDU), so the server closes, and resets at the linger
    // time since the peer never stops.
    let mut junk = vec![0u8; 1000];
    junk[0] = 0x03;
    junk[1] = 0xE0;
    let start = Instant::now();
    let mut sent = 0u64;
    while !l.attacker.peers[&t].reset {
        if l.attacker.send_raw(t, junk.clone()) {
            sent += junk.len() as u64;
        }
        l.step();
        assert!(start.elapsed() < Duration::from_secs(10), "never reset");
    }
    eprintln!(
        "streamed {sent} octets before the reset, {:?}",
        start.elapsed()
    );
    let s = l.snap();
    assert!(s.gauges.connections <= 1);
    let verified = l.good_client();
    l.drained(Duration::from_secs(5), 128 * MIB);
    assert_eq!(verified, 2000 * 4096);
    l.finish();
}

#[test]
fn zero_window_peer_is_reset_by_the_user_timeout() {
    let mut l = Lab::new(limits());
    let (t, buf) = l.session(&Hello {
        sizes: vec![1 << 20],
        ..hello(Test::ReadBw)
    });
    // Read Requests the server answers with 1 MiB each, and a receive window that never
    // opens: the server's data waits, then the user timeout (1 s here) resets it.
    l.attacker.peers.get_mut(&t).unwrap().reading = false;
    for i in 0..4u32 {
        let req = rdmap::ReadRequest {
            sink_stag: 0x1234,
            sink_to: 0,
            read_message_size: 1 << 20,
            source_stag: buf.stag,
            source_to: buf.to,
        };
        assert!(l
            .attacker
            .send_ulpdu(t, &rdmap::read_request_ulpdu(1 + i, &req)));
    }
    let start = Instant::now();
    l.until("the user timeout", Duration::from_secs(10), |l| {
        l.attacker.peers[&t].reset
    });
    let took = start.elapsed();
    assert!(took >= Duration::from_millis(900), "{took:?}");
    let s = l.snap();
    eprintln!("after {took:?}: {s:?}");
    let verified = l.good_client();
    l.drained(Duration::from_secs(5), 128 * MIB);
    assert_eq!(verified, 2000 * 4096);
    l.finish();
}

#[test]
fn peer_that_never_acknowledges_our_fin_is_reset_at_the_linger_time() {
    let mut l = Lab::new(limits());
    let t = l.open(1)[0];
    // A Request that is not a bench hello: rejected, then closed by the server. The
    // attacker never acknowledges anything again.
    let request = InitiatorConfig::default()
        .request()
        .unwrap()
        .to_bytes(proto::startup::Dialect::Rfc6581)
        .unwrap();
    l.attacker.send_raw(t, request);
    l.until("the reject", Duration::from_secs(5), |l| {
        !l.attacker.peers[&t].rx.is_empty()
    });
    l.attacker.peers.get_mut(&t).unwrap().muted = true;
    let start = Instant::now();
    l.until("the victim to forget it", Duration::from_secs(5), |l| {
        l.snap().gauges.connections == 0
    });
    let took = start.elapsed();
    assert!(took < Duration::from_secs(2), "{took:?}");
    let s = l.snap();
    assert!(s.stats.linger_resets >= 1, "{s:?}");
    let verified = l.good_client();
    l.drained(Duration::from_secs(5), 128 * MIB);
    assert_eq!(verified, 2000 * 4096);
    l.finish();
}

#[test]
fn read_requests_beyond_ird_get_a_terminate() {
    let mut l = Lab::new(limits());
    let (t, buf) = l.session(&hello(Test::ReadBw));
    let ird = match &l.attacker.peers[&t].mpa {
        Mpa::Fpdu { established, .. } => established.ird_ord.unwrap().peer_ird,
        _ => unreachable!(),
    };
    // Never reading: the Read Responses stay queued, so the Requests pile up beyond IRD.
    l.attacker.peers.get_mut(&t).unwrap().reading = false;
    for i in 0..u32::from(ird) + 8 {
        let req = rdmap::ReadRequest {
            sink_stag: 0x1234,
            sink_to: 0,
            read_message_size: 4096,
            source_stag: buf.stag,
            source_to: buf.to,
        };
        l.attacker
            .send_ulpdu(t, &rdmap::read_request_ulpdu(1 + i, &req));
    }
    l.run_for(Duration::from_millis(100));
    l.attacker.peers.get_mut(&t).unwrap().reading = true;
    l.until("a Terminate", Duration::from_secs(5), |l| {
        !l.attacker.peers[&t].terms.is_empty()
    });
    let (layer, etype, code) = term_of(&l, &t);
    eprintln!("Terminate {layer}/{etype}/{code} for Read Requests beyond IRD {ird}");
    // RFC 5040 7.4: an RDMA Read Request beyond the IRD is a Remote Operation error.
    // RDMAP, Remote Operation Error, Catastrophic error localized to the RDMAP Stream
    // (what siw reports; RFC 5040 has no code of its own for it).
    assert_eq!((layer, etype, code), (0, 2, 7));
    let verified = l.good_client();
    l.drained(Duration::from_secs(5), 128 * MIB);
    assert_eq!(verified, 2000 * 4096);
    l.finish();
}

#[test]
fn writes_to_unknown_stags_beyond_bounds_and_without_rights_get_terminates() {
    let mut l = Lab::new(limits());
    let mut seen = Vec::new();
    for case in 0..3 {
        let test = if case == 2 {
            Test::ReadBw
        } else {
            Test::WriteBw
        };
        let (t, buf) = l.session(&hello(test));
        let u = match case {
            // An STag nobody registered.
            0 => write_ulpdu(buf.stag ^ 0x5A5A_5A00, buf.to, 64),
            // The session's buffer, past its end.
            1 => write_ulpdu(buf.stag, buf.to + 4096 - 8, 64),
            // A read-bw buffer (remote read only).
            _ => write_ulpdu(buf.stag, buf.to, 64),
        };
        assert!(l.attacker.send_ulpdu(t, &u));
        l.until("a Terminate", Duration::from_secs(5), |l| {
            !l.attacker.peers[&t].terms.is_empty()
        });
        l.until("the reset or close", Duration::from_secs(5), |l| {
            let p = &l.attacker.peers[&t];
            p.reset || p.events.contains(&proto::tcp::Event::PeerClosed)
        });
        seen.push(term_of(&l, &t));
    }
    eprintln!("Terminates: {seen:?}");
    // DDP Tagged Buffer errors (layer 1 = DDP in the RFC 5040 layer field is 0x1? see
    // rdmap::TermError::triple): invalid STag, base or bounds violation, and for a region
    // without remote write, invalid STag (as siw: RFC 5041 has no access code).
    assert_eq!(
        seen[0], seen[2],
        "unknown STag and missing rights look alike"
    );
    assert_ne!(seen[0], seen[1]);
    let verified = l.good_client();
    l.drained(Duration::from_secs(5), 128 * MIB);
    assert_eq!(verified, 2000 * 4096);
    l.finish();
}

#[test]
fn bench_hello_for_1_gib_at_depth_65536_is_rejected_with_the_reason() {
    let mut l = Lab::new(limits());
    let h = Hello {
        test: Test::WriteBw,
        sizes: vec![1 << 30],
        length: Length::Iterations(10),
        tx_depth: 65536,
        verify: true,
        client_sink: None,
    };
    let t = l.attacker.connect(Lab::server_addr());
    l.until("TCP", Duration::from_secs(5), |l| {
        l.attacker.peers[&t].tcp.state() == proto::tcp::State::Established
    });
    l.attacker.start_mpa(
        t,
        InitiatorConfig {
            private_data: h.encode().unwrap(),
            ..InitiatorConfig::default()
        },
    );
    l.until("the reject", Duration::from_secs(5), |l| {
        matches!(l.attacker.peers[&t].mpa, Mpa::Failed(_))
    });
    let Mpa::Failed(why) = &l.attacker.peers[&t].mpa else {
        unreachable!()
    };
    assert!(why.contains("rejected: write-bw needs"), "{why}");
    assert!(
        why.contains("MiB on the server; a session may have 64.0 MiB"),
        "{why}"
    );
    let s = l.snap();
    assert_eq!(s.max_memory, 0, "nothing was registered for it");
    let verified = l.good_client();
    let s = l.drained(Duration::from_secs(5), 128 * MIB);
    assert!(s.rejected >= 1);
    assert_eq!(s.admitted, 1, "only the good client was admitted");
    assert_eq!(verified, 2000 * 4096);
    l.finish();
}

/// The good client's 4 KiB messages while the attacker guesses STags.
const GUESS_CLIENT_MESSAGES: u64 = 100_000;

#[test]
fn guessed_stags_of_a_concurrent_session_never_place() {
    let mut l = Lab::new(limits());
    // The good client's session runs while the attacker, in sessions of its own, floods
    // Writes to guessed STags (its own buffer's STag plus and minus small steps, and
    // random ones): each only ever gets a Terminate, and the good client's every octet
    // checks out. The client's run is long enough (400 MB) for a few hundred attack
    // sessions: the loop ends at 200 Terminates, or when the client ends first.
    l.start_client(GUESS_CLIENT_MESSAGES);
    let mut rng = 0x1234_5678_9abc_def0u64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let mut terms = 0;
    let mut guesses = 0;
    while l.client.is_some() && terms < 200 {
        let (t, buf) = l.session(&hello(Test::WriteBw));
        // A burst of guesses on one connection: the first gets the Terminate; the QP then
        // places nothing more.
        for k in 0..32u32 {
            let guess = match k % 4 {
                0 => buf.stag.wrapping_add((k + 1) << 8),
                1 => buf.stag.wrapping_sub((k + 1) << 8),
                2 => next() as u32,
                _ => (next() as u32 & 0xFFFF_FF00) | (buf.stag & 0xFF),
            };
            let to = 0x1_0000_0000u64 + (next() % (64 << 20));
            l.attacker.send_ulpdu(t, &write_ulpdu(guess, to, 256));
            guesses += 1;
        }
        l.until("a Terminate", Duration::from_secs(5), |l| {
            !l.attacker.peers[&t].terms.is_empty()
        });
        terms += l.attacker.peers[&t].terms.len();
        l.attacker.peers.remove(&t);
    }
    l.client_verified(GUESS_CLIENT_MESSAGES);
    eprintln!("{guesses} guessed Writes in {terms} sessions: only Terminates");
    assert!(terms >= 10);
    l.drained(Duration::from_secs(5), 256 * MIB);
    l.finish();
}

#[test]
fn an_idle_connection_is_reset_at_the_startup_timeout() {
    // The MPA Request wait (30 s here) is longer than the startup limit (1 s): the limit
    // ends it, with a reset.
    let mut l = Lab::with(
        Limits {
            startup_timeout: Duration::from_secs(1),
            ..limits()
        },
        ResponderConfig {
            request_timeout: Some(Duration::from_secs(30)),
            ..responder()
        },
    );
    let t = l.open(1)[0];
    let start = Instant::now();
    l.until("the reset", Duration::from_secs(5), |l| {
        l.attacker.peers[&t].reset
    });
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(800) && took < Duration::from_millis(2000),
        "{took:?}"
    );
    l.until("the count", Duration::from_secs(1), |l| {
        l.snap().stats.startup_timeouts == 1
    });
    l.drained(Duration::from_secs(5), 64 * MIB);
    l.finish();
}

/// A hello for `test` that makes the server register about `mib` MiB.
fn hello_of(mib: usize) -> Hello {
    Hello {
        test: Test::WriteBw,
        sizes: vec![mib << 20],
        length: Length::Iterations(10),
        tx_depth: 1,
        verify: true,
        client_sink: None,
    }
}

/// Starts an attacker session with `h` and returns how its startup ended: `Ok` in Full
/// Operation, or the Reject's reason.
fn try_session(l: &mut Lab, h: &Hello, first: bool) -> Result<proto::tcp::FourTuple, String> {
    let t = l.attacker.connect(Lab::server_addr());
    l.until("TCP", Duration::from_secs(5), |l| {
        l.attacker.peers[&t].tcp.state() == proto::tcp::State::Established
    });
    l.attacker.start_mpa(
        t,
        InitiatorConfig {
            private_data: h.encode().unwrap(),
            ird: 4,
            ord: 4,
            ..InitiatorConfig::default()
        },
    );
    l.until("the startup", Duration::from_secs(5), |l| {
        !matches!(l.attacker.peers[&t].mpa, Mpa::Starting(_))
    });
    match &l.attacker.peers[&t].mpa {
        Mpa::Fpdu { .. } => {
            if first {
                assert!(l.attacker.send_ulpdu(t, &rdmap::zero_length_send(1)));
            }
            Ok(t)
        }
        Mpa::Failed(why) => Err(why.clone()),
        _ => unreachable!(),
    }
}

#[test]
fn serve_budgets_refuse_with_the_reason() {
    let mut l = Lab::new(limits());
    // The server's whole budget is 256 MiB (64 MiB a session): six 40 MiB sessions fit,
    // the seventh's memory is not there.
    let mut held = Vec::new();
    let why = loop {
        match try_session(&mut l, &hello_of(40), true) {
            Ok(t) => held.push(t),
            Err(why) => break why,
        }
        // The server's startup ends when the first message arrives, after `try_session`
        // sent it: the next admission must see this session running.
        let n = held.len();
        l.until("the session to run", Duration::from_secs(5), |l| {
            l.snap().running == n
        });
        assert!(held.len() <= 6, "more than 256 MiB handed out");
    };
    assert!(why.contains("server memory busy"), "{why}");
    assert_eq!(held.len(), 6, "sessions that fit in 256 MiB");
    let s = l.snap();
    assert!(s.memory <= 256 * MIB && s.memory > 200 * MIB, "{s:?}");
    // More sessions than the server runs at once (8): small ones, past the memory.
    for t in held.drain(..) {
        l.attacker.peers.get_mut(&t).unwrap().tcp.abort();
    }
    l.until("the sessions to end", Duration::from_secs(10), |l| {
        l.snap().sessions == 0
    });
    let mut small = Vec::new();
    let why = loop {
        match try_session(&mut l, &hello(Test::WriteBw), true) {
            Ok(t) => small.push(t),
            Err(why) => break why,
        }
        let n = small.len();
        l.until("the session to run", Duration::from_secs(5), |l| {
            l.snap().running == n
        });
        assert!(small.len() <= 8, "more than 8 sessions ran at once");
    };
    assert_eq!(small.len(), 8);
    assert!(why.contains("server busy: 8 sessions running"), "{why}");
    for t in small.drain(..) {
        l.attacker.peers.get_mut(&t).unwrap().tcp.abort();
    }
    l.until("the sessions to end", Duration::from_secs(10), |l| {
        l.snap().sessions == 0
    });
    // Startups from one address that never send their first message: four at most.
    let mut starting = Vec::new();
    let why = loop {
        match try_session(&mut l, &hello(Test::WriteBw), false) {
            Ok(t) => starting.push(t),
            Err(why) => break why,
        }
        assert!(starting.len() <= 4);
    };
    assert_eq!(starting.len(), 4);
    assert!(
        why.contains("too many sessions starting from 10.77.0.3: 4"),
        "{why}"
    );
    // Meanwhile another address is served.
    let verified = l.good_client();
    assert_eq!(verified, 2000 * 4096);
    l.drained(Duration::from_secs(10), 512 * MIB);
    l.finish();
}
