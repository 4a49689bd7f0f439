//! `iwarp bench`: perftest-like bandwidth and latency runs of RDMA Write, RDMA Read and
//! Send between two iWARP endpoints.
//!
//! [`run_embedded`] runs both ends in one process over the in-memory wire
//! ([`control::embedded`]): the client (node A) on one thread, driving its core between its
//! steps (run to completion, like a DPDK lcore running its application), and a
//! [`server::Server`] (node B) on another, which runs its core and its sessions in turn
//! on that thread. `iwarp serve` is the same server on a DPDK port, with many sessions at
//! once.
//!
//! * [`client`]: one run's client side, a small function per test.
//! * [`server`]: the server: listeners, each hello checked and its memory budgeted,
//!   sessions as state machines stepped one after the other.
//! * [`session`]: the hello, the server's buffer, the result and the control Sends.
//! * [`verify`]: what `--verify` checks.
//!
//! What each test does (the server is passive unless said otherwise):
//!
//! * `write-bw`: the client keeps `tx_depth` RDMA Writes of `size` octets in flight to the
//!   server's buffer. `--verify`: message `i` goes to slot `i % tx_depth` of a ring on the
//!   server with contents that depend on `i`; the server checks every octet of every
//!   message once its last octet is there and only then grants the slot back (a credit
//!   Send), so nothing is overwritten before it is checked.
//! * `read-bw`: the client keeps up to ORD RDMA Reads in flight from the server's buffer.
//!   `--verify`: the buffer's contents depend on the offset, each Read comes from another
//!   offset, and its sink is poisoned first; the client checks every octet.
//! * `send-bw`: the client keeps Sends in flight within the credits the server grants
//!   (iWARP has no receiver-not-ready retry: a Send without a posted receive is a
//!   Terminate, RFC 5041 7.2, so the server returns credits with small Sends as it reposts
//!   receives). The server keeps perftest's 512 receives posted (`ib_send_bw`'s rx depth),
//!   or the tx depth's if more, and the client has a credit for each. `--verify`: the
//!   server checks every octet of every message before it reposts its receive, and keeps
//!   the tx depth's receives (each its own slot of the data region).
//! * `write-lat`, `send-lat`: ping-pong; each side answers the other's message with its
//!   own; one-way latency is half the round trip (perftest's convention). Writes are
//!   detected by polling the last octet of the target buffer, which RDMA Write makes
//!   visible last. `--verify`: both sides check every octet of every message.
//! * `read-lat`: one RDMA Read at a time; the latency is the full round trip. `--verify`:
//!   as read-bw.
//!
//! With `--verify` the client also counts the octets every test must have checked and
//! fails the run unless every one was.

use std::fmt;
use std::net::SocketAddrV4;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use control::embedded::{self, FaultConfig, WireConfig, BENCH_PORT};
use control::verbs::{AlignmentStats, CmError, Completion, Core, Device, InitiatorConfig};
use hdrhistogram::Histogram;

pub mod client;
pub mod scale;
pub use scale::{report_clients, run_clients, run_clients_driving, ClientRuns};
pub mod server;
pub mod session;
pub mod verify;

pub use crate::driver::describe_completion;
use crate::driver::DriverError;
use crate::mpa::{self, MpaPolicy};
pub use session::{Hello, RemoteBuffer, ServerResult};
pub use verify::pattern_byte;

use crate::report::{
    Alignment, IntervalSample, Report, ReportParams, Sample, Segments, Verification, REPORT_SCHEMA,
};

/// The six tests (named on the command line `write-bw`, `write-lat`, ...).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, clap::ValueEnum)]
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

    /// A Send test (its data uses the server's receive queue).
    pub fn is_send(self) -> bool {
        matches!(self, Test::SendBw | Test::SendLat)
    }

    /// A Read test.
    pub fn is_read(self) -> bool {
        matches!(self, Test::ReadBw | Test::ReadLat)
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

/// The faults of direction `dir` of a run (0: what the client sends, 1: what the server
/// sends), each with its own seed derived from `f.seed`.
pub fn direction_faults(f: &FaultConfig, dir: u64) -> FaultConfig {
    FaultConfig {
        seed: f.seed.wrapping_mul(2).wrapping_add(dir),
        ..*f
    }
}

/// The faults of a run in a few words, for the report: `none`, or
/// `loss=0.01 reorder=0.02 seed=1`.
pub fn faults_label(f: &FaultConfig) -> String {
    if !f.any() {
        return "none".into();
    }
    let mut parts: Vec<String> = f
        .probabilities()
        .iter()
        .filter(|(_, p)| *p > 0.0)
        .map(|(name, p)| format!("{name}={p}"))
        .collect();
    parts.push(format!("seed={}", f.seed));
    parts.join(" ")
}

fn wire(o: &BenchOptions, dir: u64) -> WireConfig {
    WireConfig {
        mtu: o.mtu,
        faults: direction_faults(&o.faults, dir),
        ..WireConfig::default()
    }
    .with_tso(o.tso)
}

/// The in-memory link of a run in a few words, for the report.
fn memory_link(o: &BenchOptions) -> String {
    if o.tso {
        format!("memory mtu={} tso", o.mtu)
    } else {
        format!("memory mtu={}", o.mtu)
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
    /// Work requests posted per doorbell by bandwidth tests (perftest's `-l` post list),
    /// 1..=`tx_depth`.
    pub post_list: usize,
    /// Completion moderation of bandwidth tests (perftest's `-Q`/`--cq-mod`): only every
    /// `cq_mod`-th send work request is signaled, and its completion covers the ones
    /// before it (a QP completes its requests in order). 1..=`tx_depth`; 1 (the default)
    /// signals every request. A read-bw run keeps at most ORD Reads in flight, and takes
    /// at most that many per completion.
    pub cq_mod: usize,
    /// IP MTU of the link.
    pub mtu: usize,
    /// The MPA policy (IRD and ORD included).
    pub mpa: MpaPolicy,
    /// Fault injection.
    pub faults: FaultConfig,
    /// The in-memory link emulates a NIC with TCP segmentation offload (and checksum
    /// offload): a node's consecutive segments leave as one frame that the link cuts
    /// ([`dataplane::port::mem::WireConfig::tso`]). Embedded runs only.
    pub tso: bool,
    /// Check every octet received.
    pub verify: bool,
    /// Show a progress line on long runs.
    pub progress: bool,
    /// Bandwidth tests: a figure per interval ([`Intervals`]).
    pub intervals: Option<Intervals>,
    /// QPs per direction (perftest's `-q`), each its own connection and session, spread
    /// over the cores.
    pub qps: usize,
    /// Poll-mode cores per node of the embedded default (`--cores`).
    pub cores: usize,
    /// Both directions at once (perftest's `-b`): each node runs `qps` clients against
    /// the other's server.
    pub bidirectional: bool,
    /// The core a client opens its connection from (`None`: the device's choice); set
    /// per QP by multi-QP runs.
    pub core: Option<usize>,
}

/// Per-interval figures of the bandwidth tests, and runs that last until stopped.
#[derive(Clone)]
pub struct Intervals {
    /// Length of an interval.
    pub every: Duration,
    /// Called with each interval's figures as it ends (the run goes on meanwhile).
    pub report: Arc<dyn Fn(&IntervalSample) + Send + Sync>,
    /// When set, the run lasts until this flag is raised (perftest's
    /// `--run_infinitely`, ended by Ctrl-C); the length is then ignored.
    pub stop: Option<Arc<AtomicBool>>,
}

impl fmt::Debug for Intervals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Intervals")
            .field("every", &self.every)
            .field("until_stopped", &self.stop.is_some())
            .finish()
    }
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            test: Test::WriteBw,
            sizes: vec![65536],
            length: Length::Iterations(1000),
            tx_depth: 128,
            post_list: 1,
            cq_mod: 1,
            mtu: 1500,
            mpa: crate::mpa::bench_default(),
            faults: FaultConfig::default(),
            tso: false,
            verify: false,
            progress: false,
            intervals: None,
            qps: 1,
            cores: 1,
            bidirectional: false,
            core: None,
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
    /// The latency histogram of each size (latency tests), in nanoseconds.
    pub histograms: Vec<(usize, Histogram<u64>)>,
    /// Octets found wrong by `--verify`, by both ends (always 0 in a correct run).
    pub verify_errors: u64,
    /// Octets checked by `--verify`, by both ends.
    pub verified_octets: u64,
    /// Octets `--verify` had to check: every octet of every message of the run.
    pub expected_octets: u64,
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
    /// `--verify` found wrong octets, or fewer checked than the run moved.
    Verify(String),
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
            BenchError::Verify(s) => write!(f, "verification failed: {s}"),
        }
    }
}

impl std::error::Error for BenchError {}

impl From<DriverError> for BenchError {
    fn from(e: DriverError) -> Self {
        match e {
            DriverError::Connect(e) => BenchError::Connect(e),
            DriverError::Completion(c) => BenchError::Completion(c),
            DriverError::Stalled(what, _) => BenchError::Stalled(what),
            DriverError::Post(e) => BenchError::Thread(e.to_string()),
            DriverError::Closed => BenchError::Protocol("the peer closed the connection".into()),
        }
    }
}

/// The shortest interval of `--interval`.
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);

/// Most per-interval figures a run keeps for its report (the live lines go on; the
/// lowest interval still counts them all).
pub const MAX_INTERVALS: usize = 1 << 16;

/// Longest a run may go without any progress.
pub const STALL: Duration = Duration::from_secs(10);

/// The most QPs per direction of a run (`-q`).
pub const MAX_QPS: usize = 1024;

/// The largest message size (1 GiB).
pub const MAX_SIZE: usize = 1 << 30;

/// Checks what both ends would refuse anyway, before anything starts.
pub fn check_options(o: &BenchOptions) -> Result<(), BenchError> {
    if o.sizes.is_empty() {
        return Err(BenchError::Options("no message size".into()));
    }
    if let Some(s) = o.sizes.iter().find(|&&s| s > MAX_SIZE) {
        return Err(BenchError::Options(format!(
            "message size {s} above the largest, {MAX_SIZE}"
        )));
    }
    if o.sizes.len() > session::MAX_SIZES {
        return Err(BenchError::Options(format!(
            "at most {} message sizes per run",
            session::MAX_SIZES
        )));
    }
    if o.tx_depth == 0 || o.tx_depth > 65536 {
        return Err(BenchError::Options(
            "tx depth must be within 1..=65536".into(),
        ));
    }
    if o.post_list == 0 || o.post_list > o.tx_depth {
        return Err(BenchError::Options(format!(
            "the post list (-l) must be within 1..={} (the tx depth)",
            o.tx_depth
        )));
    }
    if let Some(iv) = &o.intervals {
        if o.test.is_latency() {
            return Err(BenchError::Options(
                "per-interval figures (--interval, --run-infinitely) are for the bandwidth tests"
                    .into(),
            ));
        }
        if iv.every < MIN_INTERVAL {
            return Err(BenchError::Options(format!(
                "the interval must be at least {} s",
                MIN_INTERVAL.as_secs_f64()
            )));
        }
        if iv.stop.is_some() && o.sizes.len() != 1 {
            return Err(BenchError::Options(
                "a run until stopped (--run-infinitely) has one message size".into(),
            ));
        }
    }
    if o.qps == 0 || o.qps > MAX_QPS {
        return Err(BenchError::Options(format!(
            "-q must be within 1..={MAX_QPS}, not {}",
            o.qps
        )));
    }
    if o.cores == 0 || o.cores > embedded::MAX_CORES {
        return Err(BenchError::Options(format!(
            "--cores must be within 1..={}, not {}",
            embedded::MAX_CORES,
            o.cores
        )));
    }
    if o.qps > 1 && o.intervals.is_some() {
        return Err(BenchError::Options(
            "per-interval figures (--interval, --run-infinitely) are for one QP".into(),
        ));
    }
    if o.cq_mod == 0 || o.cq_mod > o.tx_depth {
        return Err(BenchError::Options(format!(
            "the completion moderation (-Q) must be within 1..={} (the tx depth)",
            o.tx_depth
        )));
    }
    if o.cq_mod > 1 && o.test.is_latency() {
        return Err(BenchError::Options(
            "completion moderation (-Q) is for the bandwidth tests: a latency test waits \
             for each message"
                .into(),
        ));
    }
    if o.post_list > 1 && o.test.is_latency() {
        return Err(BenchError::Options(
            "post lists (-l) are for the bandwidth tests: a latency test posts one request \
             at a time"
                .into(),
        ));
    }
    if o.test.is_latency() || o.test.is_send() {
        if let Some(&s) = o.sizes.iter().find(|&&s| s == 0) {
            return Err(BenchError::Options(format!(
                "{} needs a size of at least 1 (got {s})",
                o.test.name()
            )));
        }
    }
    Ok(())
}

/// Runs the benchmark over the in-memory wire, both ends in this process: one QP on
/// one core per node driven by its consumer (run to completion), or with several QPs,
/// cores or both directions as [`scale`] describes.
pub fn run_embedded(o: &BenchOptions) -> Result<BenchOutcome, BenchError> {
    check_options(o)?;
    if o.qps > 1 || o.cores > 1 || o.bidirectional {
        return scale::run(o);
    }
    let a_to_b = wire(o, 0);
    let b_to_a = wire(o, 1);
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
        .listen(BENCH_PORT, mpa::responder(&o.mpa))
        .map_err(BenchError::Connect)?;
    let srv = std::thread::Builder::new()
        .name("bench-server".into())
        .spawn(move || {
            // Both ends are this user's: the budget is what the options ask for.
            let budget = server::Budget {
                session: u64::MAX,
                total: u64::MAX,
                sessions: 1,
                pending_per_peer: 1,
            };
            let mut server = server::Server::new(b, vec![listener], budget);
            let mut core = core_b;
            let r = server.run_until(&mut core, 1, Some(STALL));
            (core, r)
        })
        .map_err(|e| BenchError::Thread(e.to_string()))?;
    let (mut core_a, client_result) =
        run_client(&a, core_a, o, server_addr, mpa::initiator(&o.mpa));
    // The client's last messages may still sit in its TCP send queue: keep its core
    // running until the server is done.
    while !srv.is_finished() {
        core_a.poll();
    }
    let (core_b, server_result) = srv
        .join()
        .map_err(|_| BenchError::Thread("server thread panicked".into()))?;
    let client = match (client_result, &server_result) {
        (Ok(c), _) => c,
        (Err(e), Err(s)) => {
            return Err(BenchError::Thread(format!("client: {e}; server: {s}")));
        }
        (Err(e), Ok(_)) => return Err(e),
    };
    let sessions = server_result?;
    if let Some(s) = sessions.iter().find_map(|s| s.result.as_ref().err()) {
        return Err(BenchError::Thread(format!("server: {s}")));
    }
    Ok(outcome(
        o,
        client,
        vec![core_a.alignment(), core_b.alignment()],
        memory_link(o),
    ))
}

/// What the client side of a run produced.
#[derive(Debug)]
pub struct ClientOutcome {
    /// One sample per size.
    pub samples: Vec<Sample>,
    /// When each size's test began and ended (for figures over several QPs).
    pub spans: Vec<(std::time::Instant, std::time::Instant)>,
    /// The connection (its core: [`control::verbs::conn_core`]).
    pub conn: control::verbs::ConnId,
    /// Each size's latency histogram (latency tests).
    pub histograms: Vec<(usize, Histogram<u64>)>,
    /// The per-interval figures of a bandwidth run measured in intervals.
    pub intervals: Vec<IntervalSample>,
    /// What the server checked.
    pub server: ServerResult,
    /// Octets the client checked itself.
    pub client_verified: u64,
    /// Octets the client found wrong.
    pub client_errors: u64,
    /// Octets both ends had to check.
    pub expected_verified: u64,
}

/// One end's segment counters as the report carries them.
fn segments(a: &AlignmentStats) -> Segments {
    Segments {
        new_whole: a.new_whole,
        new_split: a.new_split,
        new_whole_ratio: a.new_whole_ratio(),
        rtx_whole: a.rtx_whole,
        rtx_split: a.rtx_split,
        rtx_whole_ratio: a.rtx_whole_ratio(),
        retransmitted_octets: a.retransmitted_octets,
        timeouts: a.timeouts,
        fast_retransmits: a.fast_retransmits,
        spurious_timeouts: a.spurious_timeouts,
        dsack_octets: a.dsack_octets,
        tail_loss_probes: a.tail_loss_probes,
        tail_loss_probe_repairs: a.tail_loss_probe_repairs,
        lost_retransmissions: a.lost_retransmissions,
        recovery_us: a.recovery_us,
        mean_rtt_us: a.mean_rtt_us(),
        tso_frames: a.tso_frames,
        tso_segments: a.tso_segments,
        longest_poll_gap_us: a.longest_poll_gap_us,
    }
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
        mpa: mpa::label(&o.mpa),
        faults: faults_label(&o.faults),
        link,
        report_gbits: false,
        tx_depth: if o.test.is_latency() {
            1
        } else {
            o.tx_depth as u64
        },
        post_list: o.post_list as u64,
        cq_mod: if o.test.is_latency() {
            1
        } else {
            o.cq_mod as u64
        },
        qps: o.qps as u64,
        cores: o.cores as u64,
        bidirectional: o.bidirectional,
    };
    let verified = c.server.verified + c.client_verified;
    let errors = c.server.errors + c.client_errors;
    BenchOutcome {
        report: Report {
            test: o.test.verb().to_string(),
            params,
            samples: c.samples,
            verify: o.verify.then_some(Verification {
                verified_octets: verified,
                wrong_octets: errors,
                expected_octets: c.expected_verified,
            }),
            alignment: alignment.first().map(|client| Alignment {
                client: segments(client),
                server: alignment.get(1).map(segments),
            }),
            thresholds: None,
            intervals: c.intervals,
            per_qp: Vec::new(),
            schema: REPORT_SCHEMA,
        },
        histograms: c.histograms,
        verify_errors: errors,
        verified_octets: verified,
        expected_octets: c.expected_verified,
    }
}

/// The client of a run against a server at `server` (an `iwarp serve`, or the embedded
/// server thread): connects with `mpa` and `o`'s test in the MPA Request, runs every
/// size, and collects the server's verification result. Drives `core` itself and gives
/// it back, after the connection's close handshake.
pub fn run_client(
    dev: &Device,
    core: Core,
    o: &BenchOptions,
    server: SocketAddrV4,
    mpa: InitiatorConfig,
) -> (Core, Result<ClientOutcome, BenchError>) {
    let (core, r) = client::run(dev, Some(core), o, server, mpa);
    (core.expect("the client gives its core back"), r)
}

/// [`run_client`] for a client whose core runs on another thread (a QP of a multi-QP or
/// multi-core run): its waits poll only its completion queue.
pub fn run_client_elsewhere(
    dev: &Device,
    o: &BenchOptions,
    server: SocketAddrV4,
    mpa: InitiatorConfig,
) -> Result<ClientOutcome, BenchError> {
    client::run(dev, None, o, server, mpa).1
}
