//! `iwarp bench`: perftest-like bandwidth and latency runs of RDMA Write, RDMA Read and
//! Send between two iWARP endpoints.
//!
//! [`run_embedded`] runs both ends in one process over the in-memory wire
//! ([`control::embedded`]): the client (node A) on one thread, the server (node B) on
//! another, each thread driving its own poll-mode core between its consumer steps (run to
//! completion, like a DPDK lcore running its application), so the two cores of a small
//! machine are enough.
//!
//! What each test does (the server is passive unless said otherwise):
//!
//! * `write-bw`: the client keeps `tx_depth` RDMA Writes of `size` octets in flight to the
//!   server's buffer. `--verify`: each message goes to its own slot of a ring of `tx_depth`
//!   slots with content derived from its iteration number; at the end the server checks
//!   every octet of every slot against the last message written there.
//! * `read-bw`: the client keeps up to ORD RDMA Reads in flight from the server's buffer
//!   (filled with a known pattern). `--verify`: every read's sink is checked in full.
//! * `send-bw`: the client keeps Sends in flight within the credits the server grants
//!   (iWARP has no receiver-not-ready retry: a Send without a posted receive is a
//!   Terminate, RFC 5041 7.2, so the server returns credits with small Sends as it reposts
//!   receives). `--verify`: the server checks every octet of every message.
//! * `write-lat`, `send-lat`: ping-pong; each side answers the other's message with its
//!   own; one-way latency is half the round trip (perftest's convention). Writes are
//!   detected by polling the last octet of the target buffer, which RDMA Write makes
//!   visible last.
//! * `read-lat`: one RDMA Read at a time; the latency is the full round trip.

use std::fmt;
use std::net::SocketAddrV4;
use std::time::{Duration, Instant};

use control::cm::{CmError, ConnInfo, ConnRequest};
use control::embedded::{self, BENCH_PORT};
use control::startup::{RtrType, RtrTypes};
use control::verbs::{
    AcceptParams, Access, Completion, Cq, Device, InitiatorConfig, Listener, Mr, Pd, QpInit,
    QueuePair, RecvWr, ResponderConfig, SendOp, SendWr, WcOpcode, WcStatus,
};
use dataplane::lcore::{AlignmentStats, Core};
use dataplane::port::mem::WireConfig;
use dataplane::rings::ConnId;
use hdrhistogram::Histogram;

pub mod proto;

use proto::RESULT_LEN;
pub use proto::{Hello, RemoteBuffer, ServerResult};

use crate::report::{BwMeter, LatMeter, Progress, ProgressTotal, Report, ReportParams, Sample};

/// The six tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Test {
    /// RDMA Write bandwidth.
    WriteBw,
    /// RDMA Write latency (ping-pong).
    WriteLat,
    /// RDMA Read bandwidth.
    ReadBw,
    /// RDMA Read latency.
    ReadLat,
    /// Send bandwidth.
    SendBw,
    /// Send latency (ping-pong).
    SendLat,
}

impl Test {
    /// perftest's verb name.
    pub fn verb(self) -> &'static str {
        match self {
            Test::WriteBw | Test::WriteLat => "RDMA_Write",
            Test::ReadBw | Test::ReadLat => "RDMA_Read",
            Test::SendBw | Test::SendLat => "Send",
        }
    }

    /// A latency test.
    pub fn is_latency(self) -> bool {
        matches!(self, Test::WriteLat | Test::ReadLat | Test::SendLat)
    }

    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Test::WriteBw => "write-bw",
            Test::WriteLat => "write-lat",
            Test::ReadBw => "read-bw",
            Test::ReadLat => "read-lat",
            Test::SendBw => "send-bw",
            Test::SendLat => "send-lat",
        }
    }
}

/// MPA connection parameters of a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MpaMode {
    /// Markers in both directions.
    pub markers: bool,
    /// CRC.
    pub crc: bool,
    /// MPA Rev 1 (no enhanced startup) instead of Rev 2.
    pub rev1: bool,
    /// Peer-to-peer with this RTR.
    pub rtr: Option<RtrType>,
}

impl Default for MpaMode {
    fn default() -> Self {
        MpaMode {
            markers: false,
            crc: true,
            rev1: false,
            rtr: None,
        }
    }
}

impl fmt::Display for MpaMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let onoff = |b| if b { "on" } else { "off" };
        write!(
            f,
            "rev{} markers={} crc={}",
            if self.rev1 { 1 } else { 2 },
            onoff(self.markers),
            onoff(self.crc)
        )?;
        match self.rtr {
            Some(t) => write!(f, " p2p={}", format!("{t:?}").to_lowercase()),
            None => Ok(()),
        }
    }
}

/// Fault injection on the in-memory wire (both directions).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Faults {
    /// Probability a frame is lost.
    pub loss: f64,
    /// Probability a frame is held back and overtaken.
    pub reorder: f64,
    /// Probability a frame is duplicated.
    pub duplicate: f64,
    /// Probability a TCP segment is split in two or three.
    pub resegment: f64,
    /// Probability a frame has a bit flipped (caught by the TCP/IP checksums).
    pub corrupt: f64,
    /// Seed of the fault decisions.
    pub seed: u64,
}

impl Faults {
    fn any(&self) -> bool {
        self.loss > 0.0
            || self.reorder > 0.0
            || self.duplicate > 0.0
            || self.resegment > 0.0
            || self.corrupt > 0.0
    }

    fn wire(&self, mtu: usize, dir: u64) -> WireConfig {
        WireConfig {
            mtu,
            loss: self.loss,
            reorder: self.reorder,
            duplicate: self.duplicate,
            resegment: self.resegment,
            corrupt: self.corrupt,
            seed: self.seed.wrapping_mul(2).wrapping_add(dir),
            ..WireConfig::default()
        }
    }
}

impl fmt::Display for Faults {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.any() {
            return f.write_str("none");
        }
        let mut first = true;
        for (name, p) in [
            ("loss", self.loss),
            ("reorder", self.reorder),
            ("duplicate", self.duplicate),
            ("resegment", self.resegment),
            ("corrupt", self.corrupt),
        ] {
            if p > 0.0 {
                if !first {
                    f.write_str(" ")?;
                }
                first = false;
                write!(f, "{name}={p}")?;
            }
        }
        write!(f, " seed={}", self.seed)
    }
}

/// How long a run lasts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Length {
    /// This many messages (round trips for latency tests).
    Iterations(u64),
    /// Run for this long.
    Duration(Duration),
}

/// Everything a run needs.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Which test.
    pub test: Test,
    /// Message sizes, one result line each.
    pub sizes: Vec<usize>,
    /// How long each size runs.
    pub length: Length,
    /// Messages kept in flight by bandwidth tests.
    pub tx_depth: usize,
    /// IP MTU of the link.
    pub mtu: usize,
    /// MPA parameters.
    pub mpa: MpaMode,
    /// IRD and ORD to ask for.
    pub ird_ord: u16,
    /// Fault injection.
    pub faults: Faults,
    /// Check every octet received.
    pub verify: bool,
    /// Show a progress line on long runs.
    pub progress: bool,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            test: Test::WriteBw,
            sizes: vec![65536],
            length: Length::Iterations(1000),
            tx_depth: 128,
            mtu: 1500,
            mpa: MpaMode::default(),
            ird_ord: 16,
            faults: Faults::default(),
            verify: false,
            progress: false,
        }
    }
}

/// perftest's `--all` sizes: 2 to 8 MiB in powers of two.
pub fn all_sizes() -> Vec<usize> {
    (1..=23).map(|p| 1usize << p).collect()
}

/// What a run produced.
#[derive(Debug)]
pub struct BenchOutcome {
    /// Result lines and parameters.
    pub report: Report,
    /// The latency histogram of the last size (latency tests), in nanoseconds.
    pub histogram: Option<Histogram<u64>>,
    /// Segment alignment of the client's TCP, then the server's when it ran in this
    /// process (RFC 5044 5.3).
    pub alignment: Vec<AlignmentStats>,
    /// Octets found wrong by `--verify` (always 0 in a correct run).
    pub verify_errors: u64,
    /// Octets checked by `--verify`.
    pub verified_octets: u64,
}

/// A failed completion for an error message: work request, opcode, status and the
/// Terminate's layer/type/code when there was one.
pub fn describe_completion(c: &Completion) -> String {
    format!(
        "work request {} ({:?}) completed with {:?}{}",
        c.wr_id,
        c.opcode,
        c.status,
        c.term
            .map(|t| format!(" (Terminate {:?})", t.triple()))
            .unwrap_or_default()
    )
}

/// Why a run failed.
#[derive(Debug)]
pub enum BenchError {
    /// Bad options.
    Options(String),
    /// The connection could not be set up.
    Connect(CmError),
    /// A work request completed in error.
    Completion(Completion),
    /// The run stalled.
    Stalled(&'static str),
    /// The peer is not an `iwarp bench` endpoint, or sent a malformed message.
    Protocol(String),
    /// A thread failed.
    Thread(String),
}

impl fmt::Display for BenchError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BenchError::Options(s) => write!(f, "invalid options: {s}"),
            BenchError::Connect(e) => write!(f, "connection failed: {e}"),
            BenchError::Completion(c) => f.write_str(&describe_completion(c)),
            BenchError::Stalled(what) => write!(f, "no progress for 10 s while {what}"),
            BenchError::Protocol(m) => write!(f, "protocol: {m}"),
            BenchError::Thread(s) => write!(f, "benchmark thread failed: {s}"),
        }
    }
}

impl std::error::Error for BenchError {}

/// Longest a run may go without any progress.
const STALL: Duration = Duration::from_secs(10);

/// The largest message size (1 GiB).
pub const MAX_SIZE: usize = 1 << 30;

/// Deterministic content of message `i`, octet `j`.
#[inline]
pub fn pattern_byte(i: u64, j: usize) -> u8 {
    let x = (i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
        ^ (j as u64).wrapping_mul(0xC2B2_AE3D_27D4_EB4F))
        >> 29;
    x as u8
}

fn fill_pattern(buf: &mut [u8], i: u64) {
    for (j, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(i, j);
    }
}

fn count_mismatches(buf: &[u8], i: u64) -> u64 {
    buf.iter()
        .enumerate()
        .filter(|(j, b)| **b != pattern_byte(i, *j))
        .count() as u64
}

/// The endpoint of one thread: its device, core and verbs objects.
struct End {
    core: Core,
    pd: Pd,
    cq: Cq,
    qp: QueuePair,
    done: Vec<Completion>,
    /// Send credits (client of send-bw): receives the server has posted for us. Carried
    /// across message sizes with the grants in flight.
    credits: i64,
    /// Receives reposted and not yet granted (server of send-bw).
    ungranted: u64,
    /// Octets this endpoint checked (`--verify`).
    verified: u64,
    /// Where credit grants land (client of send-bw); its receives stay posted for the
    /// whole connection.
    credit_mr: Option<Mr>,
    /// The server's verification result, once received (client).
    server_result: Option<ServerResult>,
    /// Ready messages received and not yet taken (client).
    ready: u64,
    /// Credit grants sent (server of send-bw).
    grants_sent: u64,
}

impl End {
    fn new(dev: &Device, core: Core, depth: usize) -> End {
        let pd = dev.alloc_pd();
        let cq = dev.create_cq(depth * 4 + 64);
        let mut init = QpInit::new(&cq, &cq);
        init.max_send_wr = depth + 16;
        init.max_recv_wr = depth + 80;
        let qp = pd.create_qp(&init);
        End {
            core,
            pd,
            cq,
            qp,
            done: Vec::with_capacity(256),
            credits: 0,
            ungranted: 0,
            verified: 0,
            credit_mr: None,
            server_result: None,
            ready: 0,
            grants_sent: 0,
        }
    }

    /// Ends the endpoint, giving its core back (the QP, CQ and PD go).
    fn into_core(self) -> Core {
        self.core
    }

    /// One core iteration and the completions it produced.
    /// One core iteration and the completions it produced. Credit grants (send-bw) are
    /// taken here, whatever the caller is waiting for, so none is lost between sizes.
    fn step(&mut self) -> Result<usize, BenchError> {
        self.core.poll();
        self.done.clear();
        let n = self.cq.poll(&mut self.done, 256);
        for c in &self.done {
            if c.status != WcStatus::Success {
                return Err(BenchError::Completion(*c));
            }
        }
        let before = self.done.len();
        self.done
            .retain(|c| c.wr_id != WR_READY || c.opcode != WcOpcode::Recv);
        self.ready += (before - self.done.len()) as u64;
        if let Some(mr) = &self.credit_mr {
            let mut reposts = Vec::new();
            for c in &self.done {
                if c.wr_id & WR_CREDIT != 0 && c.opcode == WcOpcode::Recv {
                    let off = (c.wr_id & 63) * CREDIT_SLOT;
                    if c.byte_len == 0 {
                        // The server is ready for the next size.
                        self.ready += 1;
                    } else if c.byte_len as usize == RESULT_LEN {
                        // The server's result, after the last size.
                        let mut b = [0u8; RESULT_LEN];
                        let _ = mr.read(off as usize, &mut b);
                        self.server_result = ServerResult::decode(&b);
                    } else {
                        let mut b = [0u8; 8];
                        let _ = mr.read(off as usize, &mut b[..(c.byte_len as usize).min(8)]);
                        self.credits += u64::from_le_bytes(b) as i64;
                    }
                    reposts.push(RecvWr {
                        wr_id: c.wr_id,
                        local: mr.sge(off, CREDIT_SLOT as u32),
                    });
                }
            }
            self.done
                .retain(|c| !(c.wr_id & WR_CREDIT != 0 && c.opcode == WcOpcode::Recv));
            for wr in reposts {
                self.post_recv(wr)?;
            }
        }
        Ok(n)
    }

    fn wait<T>(
        &mut self,
        p: &control::verbs::Pending<T>,
        what: &'static str,
    ) -> Result<T, BenchError> {
        let end = Instant::now() + STALL;
        loop {
            self.core.poll();
            if let Some(r) = p.try_get() {
                return r.map_err(BenchError::Connect);
            }
            if Instant::now() > end {
                return Err(BenchError::Stalled(what));
            }
        }
    }

    fn post_send(&mut self, wr: SendWr) -> Result<(), BenchError> {
        let end = Instant::now() + STALL;
        loop {
            match self.qp.post_send(wr) {
                Ok(()) => return Ok(()),
                Err(control::verbs::PostError::QueueFull) => {
                    self.core.poll();
                    if Instant::now() > end {
                        return Err(BenchError::Stalled("posting"));
                    }
                }
                Err(e) => return Err(BenchError::Thread(e.to_string())),
            }
        }
    }

    fn post_recv(&mut self, wr: RecvWr) -> Result<(), BenchError> {
        self.qp
            .post_recv(wr)
            .map_err(|e| BenchError::Thread(e.to_string()))
    }
}

type Remote = RemoteBuffer;

const WR_CREDIT: u64 = 1 << 62;
const WR_DONE: u64 = 1 << 61;
const WR_RESULT: u64 = 1 << 60;
const WR_READY: u64 = 1 << 59;
/// Octets per credit receive.
const CREDIT_SLOT: u64 = 64;
/// Credit receives the send-bw client keeps posted.
const CREDIT_RECVS: u64 = 64;

fn initiator_config(o: &BenchOptions) -> InitiatorConfig {
    let mut c = InitiatorConfig {
        markers: o.mpa.markers,
        crc: o.mpa.crc,
        enhanced: !o.mpa.rev1,
        ird: o.ird_ord,
        ord: o.ird_ord,
        ..Default::default()
    };
    if let Some(t) = o.mpa.rtr {
        c.peer_to_peer = true;
        c.rtr_types = RtrTypes::NONE.with(t);
    }
    c
}

fn responder_config(o: &BenchOptions) -> ResponderConfig {
    ResponderConfig {
        markers: o.mpa.markers,
        crc: o.mpa.crc,
        ..Default::default()
    }
}

/// Buffer size of one side.
/// The server's buffer for messages of `size`: one slot per message in flight when every
/// message is verified (write-bw, send-bw), else one slot shared by all (as perftest).
fn buffer_len(o: &BenchOptions, size: usize) -> usize {
    let slots = match o.test {
        Test::WriteBw | Test::SendBw if o.verify => o.tx_depth,
        _ => 1,
    };
    (size * slots).max(1)
}

/// Checks what both ends would refuse anyway, before anything starts.
fn check_options(o: &BenchOptions) -> Result<(), BenchError> {
    if o.sizes.is_empty() {
        return Err(BenchError::Options("no message size".into()));
    }
    if let Some(s) = o.sizes.iter().find(|&&s| s > MAX_SIZE) {
        return Err(BenchError::Options(format!(
            "message size {s} above the largest, {MAX_SIZE}"
        )));
    }
    if o.sizes.len() > proto::MAX_SIZES {
        return Err(BenchError::Options(format!(
            "at most {} message sizes per run",
            proto::MAX_SIZES
        )));
    }
    if o.tx_depth == 0 || o.tx_depth > 65536 {
        return Err(BenchError::Options(
            "tx depth must be within 1..=65536".into(),
        ));
    }
    if o.test == Test::WriteBw && o.verify && matches!(o.length, Length::Duration(_)) {
        return Err(BenchError::Options(
            "write-bw --verify needs a number of iterations (the server checks each slot \
             against the last message written there)"
                .into(),
        ));
    }
    if o.test.is_latency() {
        if let Some(&s) = o.sizes.iter().find(|&&s| s == 0) {
            return Err(BenchError::Options(format!(
                "latency tests need a size of at least 1 (got {s})"
            )));
        }
    }
    Ok(())
}

/// Runs the benchmark over the in-memory wire, both ends in this process.
pub fn run_embedded(o: &BenchOptions) -> Result<BenchOutcome, BenchError> {
    check_options(o)?;
    let a_to_b = o.faults.wire(o.mtu, 0);
    let b_to_a = o.faults.wire(o.mtu, 1);
    let pair = embedded::pair(a_to_b, b_to_a, embedded::tcp_config(o.mtu))
        .map_err(|e| BenchError::Options(e.to_string()))?;
    let server_addr = pair.server_addr();
    let embedded::Pair {
        a,
        core_a,
        b,
        core_b,
    } = pair;
    let listener = b
        .listen(BENCH_PORT, responder_config(o))
        .map_err(BenchError::Connect)?;
    let server = std::thread::Builder::new()
        .name("bench-server".into())
        .spawn(move || {
            let (core, r) = serve_session(&b, core_b, &[listener], Some(STALL));
            let r = r.and_then(|s| s.ok_or(BenchError::Stalled("waiting for the client")));
            (core, r)
        })
        .map_err(|e| BenchError::Thread(e.to_string()))?;
    let (mut core_a, client_result) = run_client(&a, core_a, o, server_addr, initiator_config(o));
    // The client's last messages may still sit in its TCP send queue: keep its core
    // running until the server is done.
    while !server.is_finished() {
        core_a.poll();
    }
    let (core_b, server_result) = server
        .join()
        .map_err(|_| BenchError::Thread("server thread panicked".into()))?;
    let client = match (client_result, &server_result) {
        (Ok(c), _) => c,
        (Err(e), Err(s)) => {
            return Err(BenchError::Thread(format!("client: {e}; server: {s}")));
        }
        (Err(e), Ok(_)) => return Err(e),
    };
    server_result?;
    Ok(outcome(
        o,
        client,
        vec![core_a.alignment(), core_b.alignment()],
        format!("memory mtu={}", o.mtu),
    ))
}

/// What the client side of a run produced.
#[derive(Debug)]
pub struct ClientOutcome {
    /// One sample per size.
    pub samples: Vec<Sample>,
    /// The last size's latency histogram (latency tests).
    pub histogram: Option<Histogram<u64>>,
    /// What the server checked.
    pub server: ServerResult,
    /// Octets the client checked itself (read-bw).
    pub client_verified: u64,
}

/// The report of a run from the client's outcome.
pub fn outcome(
    o: &BenchOptions,
    c: ClientOutcome,
    alignment: Vec<AlignmentStats>,
    link: String,
) -> BenchOutcome {
    let params = ReportParams {
        size: o.sizes[0] as u64,
        iterations: match o.length {
            Length::Iterations(n) => n,
            Length::Duration(_) => 0,
        },
        duration_s: match o.length {
            Length::Duration(d) => Some(d.as_secs_f64()),
            Length::Iterations(_) => None,
        },
        mpa: o.mpa.to_string(),
        faults: o.faults.to_string(),
        link,
    };
    BenchOutcome {
        report: Report {
            test: o.test.verb().to_string(),
            params,
            samples: c.samples,
        },
        histogram: c.histogram,
        alignment,
        verify_errors: c.server.errors,
        verified_octets: c.server.verified + c.client_verified,
    }
}

/// The client of a run against a server at `server` (an `iwarp serve`, or the embedded
/// server thread): connects with `mpa` and `o`'s test in the MPA Request, runs every
/// size, and collects the server's verification result. Drives `core` itself and gives
/// it back.
pub fn run_client(
    dev: &Device,
    core: Core,
    o: &BenchOptions,
    server: SocketAddrV4,
    mpa: InitiatorConfig,
) -> (Core, Result<ClientOutcome, BenchError>) {
    if let Err(e) = check_options(o) {
        return (core, Err(e));
    }
    let depth = o.tx_depth.max(usize::from(mpa.ord));
    let mut end = End::new(dev, core, depth);
    let r = client_main(&mut end, dev, o, server, mpa);
    if let Ok((_, conn)) = &r {
        dev.disconnect(*conn);
        let linger = Instant::now() + Duration::from_millis(20);
        while Instant::now() < linger {
            end.core.poll();
        }
    }
    let core = end.into_core();
    (core, r.map(|(c, _)| c))
}

/// What one served session was.
#[derive(Debug)]
pub struct SessionOutcome {
    /// The client.
    pub peer: SocketAddrV4,
    /// What it asked for.
    pub hello: Hello,
    /// What this server checked.
    pub result: ServerResult,
}

/// Serves one `iwarp bench` session: waits at most `wait` (forever if `None`) for a
/// connection request on any of `listeners`, runs the test its hello asks for, and
/// disconnects. `Ok(None)`: no request came. A request that is not a bench hello is
/// rejected with the reason as private data. Drives `core` itself and gives it back.
pub fn serve_session(
    dev: &Device,
    mut core: Core,
    listeners: &[Listener],
    wait: Option<Duration>,
) -> (Core, Result<Option<SessionOutcome>, BenchError>) {
    let until = wait.map(|w| Instant::now() + w);
    let (listener, req, hello) = loop {
        core.poll();
        let mut got = None;
        for l in listeners {
            if let Some(r) = l.try_next() {
                got = Some((l, r));
                break;
            }
        }
        if let Some((l, req)) = got {
            match Hello::decode(&req.request.request.private_data) {
                Ok(h) => break (l, req, h),
                Err(e) => {
                    l.reject(&req, e.to_string().into_bytes());
                    continue;
                }
            }
        }
        if until.is_some_and(|u| Instant::now() > u) {
            return (core, Ok(None));
        }
    };
    let peer = SocketAddrV4::new(req.tuple.remote_addr, req.tuple.remote_port);
    let o = BenchOptions {
        test: hello.test,
        sizes: hello.sizes.clone(),
        length: hello.length,
        tx_depth: hello.tx_depth,
        verify: hello.verify,
        ..BenchOptions::default()
    };
    let depth = o.tx_depth.max(128);
    let mut end = End::new(dev, core, depth);
    let r = server_main(&mut end, listener, req, &o, hello.client_sink);
    if let Ok((_, conn)) = &r {
        dev.disconnect(*conn);
        let linger = Instant::now() + Duration::from_millis(20);
        while Instant::now() < linger {
            end.core.poll();
        }
    }
    let core = end.into_core();
    (
        core,
        r.map(|(result, _)| {
            Some(SessionOutcome {
                peer,
                hello,
                result,
            })
        }),
    )
}

fn connect_client(
    end: &mut End,
    dev: &Device,
    server: SocketAddrV4,
    mut mpa: InitiatorConfig,
    hello: &Hello,
) -> Result<(ConnInfo, Remote), BenchError> {
    mpa.private_data = hello
        .encode()
        .map_err(|e| BenchError::Options(e.to_string()))?;
    let p = dev.connect(&end.qp, server, mpa);
    let info = end.wait(&p, "connecting")?;
    let remote = proto::decode_buffer(info.peer_private_data())
        .map_err(|e| BenchError::Protocol(e.to_string()))?;
    if !info.established.peer_to_peer {
        // Client-server model: the Initiator speaks first (RFC 5044 7.1.2 rule 4). A
        // zero-length Send, which the server has a receive posted for.
        end.post_send(SendWr {
            wr_id: WR_DONE | 1,
            op: SendOp::Send,
            local: control::verbs::Sge {
                stag: 0,
                to: 0,
                len: 0,
            },
            signaled: true,
        })?;
        wait_one(end, |c| c.wr_id == WR_DONE | 1, "sending the first message")?;
    }
    Ok((info, remote))
}

fn wait_one(
    end: &mut End,
    mut f: impl FnMut(&Completion) -> bool,
    what: &'static str,
) -> Result<Completion, BenchError> {
    let until = Instant::now() + STALL;
    loop {
        end.step()?;
        if let Some(c) = end.done.iter().find(|c| f(c)) {
            return Ok(*c);
        }
        if Instant::now() > until {
            return Err(BenchError::Stalled(what));
        }
    }
}

fn server_main(
    end: &mut End,
    listener: &Listener,
    req: ConnRequest,
    o: &BenchOptions,
    client_sink: Option<Remote>,
) -> Result<(ServerResult, ConnId), BenchError> {
    // A receive for the client's first message (client-server model), the end markers,
    // and the source of the result.
    let ctl = end
        .pd
        .reg_mr(64, Access::LOCAL_WRITE)
        .map_err(|e| BenchError::Thread(e.to_string()))?;
    let max = o.sizes.iter().copied().max().unwrap_or(1).max(1);
    let data = end
        .pd
        .reg_mr(
            buffer_len(o, max),
            Access::LOCAL_WRITE | Access::REMOTE_WRITE | Access::REMOTE_READ,
        )
        .map_err(|e| BenchError::Thread(e.to_string()))?;
    let src = end
        .pd
        .reg_mr(max.max(RESULT_LEN), Access::LOCAL_WRITE)
        .map_err(|e| BenchError::Thread(e.to_string()))?;
    let grants = end
        .pd
        .reg_mr((CREDIT_RECVS * 8) as usize, Access::LOCAL_WRITE)
        .map_err(|e| BenchError::Thread(e.to_string()))?;
    let bufs = ServerBuffers {
        data,
        ctl,
        src,
        slot: max,
        grants,
    };
    match o.test {
        Test::SendBw | Test::SendLat => {
            for s in 0..o.tx_depth {
                end.post_recv(RecvWr {
                    wr_id: s as u64,
                    local: ctl_slot(&bufs.data, max, s, o.tx_depth),
                })?;
            }
        }
        _ => end.post_recv(RecvWr {
            wr_id: WR_DONE | 2,
            local: bufs.ctl.sge(0, 64),
        })?,
    }
    let params = AcceptParams {
        private_data: proto::encode_buffer(Remote {
            stag: bufs.data.key(),
            to: bufs.data.base_to(),
        }),
        ..AcceptParams::default()
    };
    let p = listener.accept(&req, &end.qp, params);
    let info = end.wait(&p, "accepting")?;
    let mut result = ServerResult::default();
    let mut first_pending = !info.established.peer_to_peer;
    for &size in &o.sizes {
        let (e, v) = serve_size(end, o, size, client_sink, &bufs, &mut first_pending)?;
        result.errors += e;
        result.verified += v;
    }
    // Tell the client what was checked.
    let _ = bufs.src.write(0, &result.encode());
    end.post_send(SendWr {
        wr_id: WR_RESULT,
        op: SendOp::Send,
        local: bufs.src.sge(0, RESULT_LEN as u32),
        signaled: true,
    })?;
    wait_one(end, |c| c.wr_id == WR_RESULT, "sending the result")?;
    Ok((result, info.conn))
}

/// Server side of one message size. Returns (octets wrong, octets verified).
fn serve_size(
    end: &mut End,
    o: &BenchOptions,
    size: usize,
    client_sink: Option<Remote>,
    bufs: &ServerBuffers,
    first_pending: &mut bool,
) -> Result<(u64, u64), BenchError> {
    let (buf, ctl) = (&bufs.data, &bufs.ctl);
    if o.test == Test::ReadBw || o.test == Test::ReadLat {
        let mut v = vec![0; size];
        fill_pattern(&mut v, 7);
        let _ = buf.write(0, &v);
    }
    // Ready: the client starts this size only now (a zero-length Send), so nothing of it
    // overlaps the previous size's checks.
    end.post_send(SendWr {
        wr_id: WR_READY,
        op: SendOp::Send,
        local: control::verbs::Sge {
            stag: 0,
            to: 0,
            len: 0,
        },
        signaled: false,
    })?;
    let (mut errors, mut verified) = (0, 0);
    let mut received: u64 = 0;
    let mut last_activity = Instant::now();
    let mut scratch = vec![0u8; size];
    let mut ungranted = end.ungranted;
    let mut write_lat_expect: u8 = 1;
    let src = &bufs.src;
    let client_buf = client_sink;
    loop {
        let n = end.step()?;
        if n > 0 {
            last_activity = Instant::now();
        }
        let done = std::mem::take(&mut end.done);
        let mut finished = false;
        for c in &done {
            if c.opcode != WcOpcode::Recv {
                continue;
            }
            if c.byte_len == 0 {
                // Zero-length Sends are control: the client-server model's first message,
                // then the end of this size. Repost the receive for what comes next.
                end.post_recv(RecvWr {
                    wr_id: c.wr_id,
                    local: if c.wr_id == WR_DONE | 2 {
                        ctl.sge(0, 64)
                    } else {
                        ctl_slot(buf, bufs.slot, c.wr_id as usize, o.tx_depth)
                    },
                })?;
                if *first_pending {
                    *first_pending = false;
                } else {
                    finished = true;
                }
                continue;
            }
            // A data Send (send-bw / send-lat).
            let s = c.wr_id as usize;
            // Sends arrive in order (RFC 5040 5.5): this is the size's message `seq`.
            let seq = received;
            received += 1;
            if o.verify {
                let sge = ctl_slot(buf, bufs.slot, s, o.tx_depth);
                let off = (sge.to - buf.base_to()) as usize;
                let _ = buf.read(off, &mut scratch);
                if c.byte_len as usize != size {
                    errors += size as u64;
                } else {
                    errors += count_mismatches(&scratch, seq);
                }
                verified += size as u64;
            }
            end.post_recv(RecvWr {
                wr_id: c.wr_id,
                local: ctl_slot(buf, bufs.slot, s, o.tx_depth),
            })?;
            if o.test == Test::SendLat {
                end.post_send(SendWr {
                    wr_id: received,
                    op: SendOp::Send,
                    local: src.sge(0, size as u32),
                    signaled: false,
                })?;
            } else {
                ungranted += 1;
                if ungranted >= (o.tx_depth as u64 / 4).max(1) {
                    // Grant credits: a Send carrying the count (the client has receives
                    // posted for these).
                    // Each grant has its own slot: the Send's payload is read when the
                    // core frames it, after later grants may have been written.
                    let off = (end.grants_sent % CREDIT_RECVS) * 8;
                    end.grants_sent += 1;
                    let _ = bufs.grants.write(off as usize, &ungranted.to_le_bytes());
                    end.post_send(SendWr {
                        wr_id: WR_CREDIT,
                        op: SendOp::Send,
                        local: bufs.grants.sge(off, 8),
                        signaled: false,
                    })?;
                    ungranted = 0;
                }
            }
        }
        end.done = done;
        if finished {
            break;
        }
        if o.test == Test::WriteLat {
            // Answer each ping (last octet = expected counter) with a pong.
            if buf.load_u8_acquire(size - 1) == Some(write_lat_expect) {
                let _ = src.write(size - 1, &[write_lat_expect]);
                let Some(r) = client_buf else {
                    return Err(BenchError::Protocol(
                        "write-lat without the client's buffer".into(),
                    ));
                };
                end.post_send(SendWr {
                    wr_id: write_lat_expect as u64,
                    op: SendOp::Write {
                        remote_stag: r.stag,
                        remote_to: r.to,
                    },
                    local: src.sge(0, size as u32),
                    signaled: false,
                })?;
                write_lat_expect = next_counter(write_lat_expect);
                last_activity = Instant::now();
            }
        }
        if last_activity.elapsed() > STALL * 3 {
            return Err(BenchError::Stalled("serving"));
        }
    }
    // Every slot holds the last message written to it (run_embedded refuses write-bw
    // --verify in duration mode, where the count is unknown).
    if let (true, Test::WriteBw, Length::Iterations(iters)) = (o.verify, o.test, o.length) {
        let slots = o.tx_depth as u64;
        let mut v = vec![0; size];
        for s in 0..slots.min(iters) {
            let last = (iters - 1 - s) / slots * slots + s;
            let _ = buf.read(s as usize * size, &mut v);
            errors += count_mismatches(&v, last);
            verified += size as u64;
        }
    }
    end.ungranted = ungranted;
    Ok((errors, verified))
}

/// The server's registered memory, kept for the whole run (receives stay posted across
/// message sizes).
struct ServerBuffers {
    data: Mr,
    ctl: Mr,
    /// Source of the server's own Sends and Writes.
    src: Mr,
    /// Slot size: the largest message.
    slot: usize,
    /// Sources of the credit grants (send-bw), one 8-octet slot per grant in flight.
    grants: Mr,
}

fn ctl_slot(buf: &Mr, size: usize, s: usize, slots: usize) -> control::verbs::Sge {
    // Send tests use one buffer of `size` per slot only with --verify; otherwise all
    // receives share the buffer (perftest does the same).
    let off = if buf.len() >= size * slots {
        s * size
    } else {
        0
    };
    buf.sge(off as u64, size as u32)
}

fn next_counter(c: u8) -> u8 {
    if c == 255 {
        1
    } else {
        c + 1
    }
}

fn client_main(
    end: &mut End,
    dev: &Device,
    o: &BenchOptions,
    server: SocketAddrV4,
    mpa: InitiatorConfig,
) -> Result<(ClientOutcome, ConnId), BenchError> {
    if o.test == Test::SendBw {
        // Receives for the server's credit grants, posted before the connection exists.
        let mr = end
            .pd
            .reg_mr((CREDIT_SLOT * CREDIT_RECVS) as usize, Access::LOCAL_WRITE)
            .map_err(|e| BenchError::Thread(e.to_string()))?;
        for i in 0..CREDIT_RECVS {
            end.post_recv(RecvWr {
                wr_id: WR_CREDIT | i,
                local: mr.sge(i * CREDIT_SLOT, CREDIT_SLOT as u32),
            })?;
        }
        end.credit_mr = Some(mr);
        end.credits = o.tx_depth as i64;
    }
    let max = o.sizes.iter().copied().max().unwrap_or(1).max(1);
    // The latency tests' sink (write-lat: the server's answers land here, so the server
    // learns it from the hello).
    let sink = end
        .pd
        .reg_mr(max, Access::LOCAL_WRITE | Access::REMOTE_WRITE)
        .map_err(|e| BenchError::Thread(e.to_string()))?;
    let result_mr = end
        .pd
        .reg_mr(64, Access::LOCAL_WRITE)
        .map_err(|e| BenchError::Thread(e.to_string()))?;
    let hello = Hello {
        test: o.test,
        sizes: o.sizes.clone(),
        length: o.length,
        tx_depth: o.tx_depth,
        verify: o.verify,
        client_sink: (o.test == Test::WriteLat).then(|| Remote {
            stag: sink.key(),
            to: sink.base_to(),
        }),
    };
    if o.test != Test::SendBw {
        // The server's ready for the first size (send-bw: it lands in a credit receive).
        end.post_recv(RecvWr {
            wr_id: WR_READY,
            local: result_mr.sge(0, 0),
        })?;
    }
    let (info, r) = connect_client(end, dev, server, mpa, &hello)?;
    let mut samples = Vec::new();
    let mut hist = None;
    for (k, &size) in o.sizes.iter().enumerate() {
        let until = Instant::now() + STALL;
        while end.ready == 0 {
            end.step()?;
            if Instant::now() > until {
                return Err(BenchError::Stalled("waiting for the server to be ready"));
            }
        }
        end.ready -= 1;
        let (s, h) = match o.test {
            Test::WriteBw | Test::ReadBw | Test::SendBw => (bw_client(end, o, size, r)?, None),
            _ => {
                let (s, h) = lat_client(end, o, size, r, &sink)?;
                (s, Some(h))
            }
        };
        samples.push(s);
        hist = h.or(hist);
        if o.test != Test::SendBw {
            // The server's next ready, or its result after the last size (send-bw: they
            // land in credit receives, which End::step recognises by their length).
            end.post_recv(if k + 1 == o.sizes.len() {
                RecvWr {
                    wr_id: WR_RESULT,
                    local: result_mr.sge(0, 64),
                }
            } else {
                RecvWr {
                    wr_id: WR_READY,
                    local: result_mr.sge(0, 0),
                }
            })?;
        }
        // Tell the server this size is over.
        end.post_send(SendWr {
            wr_id: WR_DONE,
            op: SendOp::Send,
            local: control::verbs::Sge {
                stag: 0,
                to: 0,
                len: 0,
            },
            signaled: true,
        })?;
        wait_one(end, |c| c.wr_id == WR_DONE, "finishing")?;
    }
    let until = Instant::now() + STALL;
    let server = loop {
        if let Some(r) = end.server_result {
            break r;
        }
        end.step()?;
        if let Some(c) = end.done.iter().find(|c| c.wr_id == WR_RESULT) {
            let mut b = [0u8; RESULT_LEN];
            let n = (c.byte_len as usize).min(RESULT_LEN);
            let _ = result_mr.read(0, &mut b[..n]);
            end.server_result = Some(ServerResult::decode(&b[..c.byte_len as usize]).ok_or_else(
                || {
                    BenchError::Protocol(format!(
                        "the server's result message of {} octets is malformed",
                        c.byte_len
                    ))
                },
            )?);
        }
        if Instant::now() > until {
            return Err(BenchError::Stalled("waiting for the server's result"));
        }
    };
    Ok((
        ClientOutcome {
            samples,
            histogram: hist,
            server,
            client_verified: end.verified,
        },
        info.conn,
    ))
}

fn bw_client(
    end: &mut End,
    o: &BenchOptions,
    size: usize,
    r: Remote,
) -> Result<Sample, BenchError> {
    let slots = o.tx_depth;
    let src_len = if o.verify && o.test != Test::ReadBw {
        size * slots
    } else {
        size
    }
    .max(1);
    let src = end
        .pd
        .reg_mr(src_len, Access::LOCAL_WRITE)
        .map_err(|e| BenchError::Thread(e.to_string()))?;
    let depth = match o.test {
        Test::ReadBw => (o.tx_depth).min(o.ird_ord as usize).max(1),
        _ => o.tx_depth,
    };
    // send-bw: every Send needs a receive the server granted (End::step counts grants).
    let limited = o.test == Test::SendBw;
    let total = match o.length {
        Length::Iterations(n) => Some(n),
        Length::Duration(_) => None,
    };
    let deadline = match o.length {
        Length::Duration(d) => Some(Instant::now() + d),
        Length::Iterations(_) => None,
    };
    let mut progress = o.progress.then(|| {
        Progress::new(match o.length {
            Length::Iterations(n) => ProgressTotal::Iterations(n),
            Length::Duration(d) => ProgressTotal::Duration(d),
        })
    });
    let mut meter = BwMeter::with_capacity(size as u64, total.unwrap_or(0).min(1 << 24) as usize);
    let start = Instant::now();
    let (mut posted, mut completed): (u64, u64) = (0, 0);
    let mut scratch = vec![0u8; size];
    let mut stage = vec![0u8; size];
    let mut last_progress = Instant::now();
    let mut verify_errors = 0u64;
    loop {
        let more = match (total, deadline) {
            (Some(n), _) => posted < n,
            (None, Some(d)) => Instant::now() < d,
            _ => false,
        };
        if !more && completed == posted {
            break;
        }
        // Keep the pipe full.
        while more_allowed(total, deadline, posted)
            && (posted - completed) < depth as u64
            && (!limited || end.credits > 0)
        {
            let i = posted;
            let slot = if o.verify && o.test != Test::ReadBw {
                (i % slots as u64) as usize
            } else {
                0
            };
            let local = src.sge((slot * size) as u64, size as u32);
            if o.verify && o.test != Test::ReadBw {
                fill_pattern(&mut stage, i);
                let _ = src.write(slot * size, &stage);
            }
            let op = match o.test {
                Test::WriteBw => SendOp::Write {
                    remote_stag: r.stag,
                    remote_to: r.to + (slot * size) as u64,
                },
                Test::ReadBw => SendOp::Read {
                    remote_stag: r.stag,
                    remote_to: r.to,
                },
                _ => SendOp::Send,
            };
            end.post_send(SendWr {
                wr_id: i,
                op,
                local,
                signaled: true,
            })?;
            meter.post(start.elapsed());
            posted += 1;
            if limited {
                end.credits -= 1;
            }
            if !more_allowed(total, deadline, posted) {
                break;
            }
        }
        let n = end.step()?;
        let now = start.elapsed();
        let done = std::mem::take(&mut end.done);
        for c in &done {
            if c.opcode == WcOpcode::Recv {
                continue;
            }
            completed += 1;
            meter.complete(now);
            if o.verify && o.test == Test::ReadBw {
                let _ = src.read(0, &mut scratch);
                verify_errors += count_mismatches(&scratch, 7);
                end.verified += size as u64;
            }
        }
        end.done = done;
        if n > 0 {
            last_progress = Instant::now();
        } else if last_progress.elapsed() > STALL {
            return Err(BenchError::Stalled("waiting for completions"));
        }
        if let Some(p) = progress.as_mut() {
            match o.length {
                Length::Iterations(_) => p.update(completed),
                Length::Duration(_) => p.update(start.elapsed().as_millis() as u64),
            }
        }
    }
    if let Some(p) = progress.as_mut() {
        p.finish();
    }
    if verify_errors > 0 {
        return Err(BenchError::Thread(format!(
            "{verify_errors} octets read back wrong"
        )));
    }
    Ok(Sample::Bw(meter.sample()))
}

fn more_allowed(total: Option<u64>, deadline: Option<Instant>, posted: u64) -> bool {
    match (total, deadline) {
        (Some(n), _) => posted < n,
        (None, Some(d)) => Instant::now() < d,
        _ => false,
    }
}

fn lat_client(
    end: &mut End,
    o: &BenchOptions,
    size: usize,
    r: Remote,
    dst: &Mr,
) -> Result<(Sample, Histogram<u64>), BenchError> {
    let src = end
        .pd
        .reg_mr(size, Access::LOCAL_WRITE)
        .map_err(|e| BenchError::Thread(e.to_string()))?;
    // The answers' counters start over at 1: clear the last octet of the last size's.
    let _ = dst.write(size - 1, &[0]);
    let iters = match o.length {
        Length::Iterations(n) => n,
        Length::Duration(_) => u64::MAX,
    };
    let deadline = match o.length {
        Length::Duration(d) => Some(Instant::now() + d),
        Length::Iterations(_) => None,
    };
    let mut progress = o.progress.then(|| {
        Progress::new(match o.length {
            Length::Iterations(n) => ProgressTotal::Iterations(n),
            Length::Duration(d) => ProgressTotal::Duration(d),
        })
    });
    let mut meter = LatMeter::new(size as u64);
    let mut counter: u8 = 1;
    let mut stage = vec![0u8; if o.verify { size } else { 0 }];
    let start = Instant::now();
    if o.test == Test::SendLat {
        end.post_recv(RecvWr {
            wr_id: 0,
            local: dst.sge(0, size as u32),
        })?;
    }
    let mut i = 0u64;
    while i < iters && deadline.is_none_or(|d| Instant::now() < d) {
        if o.verify && o.test == Test::SendLat {
            // The server checks every message (send-lat detects answers by their
            // completion, not by the last octet).
            fill_pattern(&mut stage, i);
            let _ = src.write(0, &stage);
        } else {
            let _ = src.write(size - 1, &[counter]);
        }
        let t0 = Instant::now();
        let op = match o.test {
            Test::WriteLat => SendOp::Write {
                remote_stag: r.stag,
                remote_to: r.to,
            },
            Test::ReadLat => SendOp::Read {
                remote_stag: r.stag,
                remote_to: r.to,
            },
            _ => SendOp::Send,
        };
        end.post_send(SendWr {
            wr_id: i,
            op,
            local: if o.test == Test::ReadLat {
                dst.sge(0, size as u32)
            } else {
                src.sge(0, size as u32)
            },
            signaled: o.test == Test::ReadLat,
        })?;
        let until = Instant::now() + STALL;
        loop {
            end.step()?;
            let done = match o.test {
                Test::WriteLat => dst.load_u8_acquire(size - 1) == Some(counter),
                Test::ReadLat => end
                    .done
                    .iter()
                    .any(|c| c.wr_id == i && c.opcode == WcOpcode::Read),
                _ => end.done.iter().any(|c| c.opcode == WcOpcode::Recv),
            };
            if done {
                break;
            }
            if Instant::now() > until {
                return Err(BenchError::Stalled("waiting for the answer"));
            }
        }
        let rtt = t0.elapsed();
        meter.record(if o.test == Test::ReadLat {
            rtt
        } else {
            rtt / 2
        });
        let more = i + 1 < iters && deadline.is_none_or(|d| Instant::now() < d);
        if o.test == Test::SendLat && more {
            end.post_recv(RecvWr {
                wr_id: i + 1,
                local: dst.sge(0, size as u32),
            })?;
        }
        counter = next_counter(counter);
        i += 1;
        if !more {
            break;
        }
        if let Some(p) = progress.as_mut() {
            match o.length {
                Length::Iterations(_) => p.update(i),
                Length::Duration(_) => p.update(start.elapsed().as_millis() as u64),
            }
        }
    }
    if let Some(p) = progress.as_mut() {
        p.finish();
    }
    let hist = meter.histogram().clone();
    Ok((Sample::Lat(meter.sample()), hist))
}
