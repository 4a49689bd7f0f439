//! Runs of several QPs, cores or directions over the embedded default (`-q`, `--cores`,
//! `-b`).
//!
//! Each node has `cores` poll-mode cores, each on a thread of its own that does nothing
//! but poll ([`control::verbs::spawn_core`]); the multi-queue in-memory wire spreads the
//! flows over them by RSS ([`control::embedded::pair_cores`]). The consumer work runs on
//! other threads, so it never takes a poll core's time: one thread per client QP (QP `q`
//! opens its connection from core `q % cores`), and one server thread per serving node
//! stepping all of its sessions. With `-b` both nodes serve and both run clients.
//!
//! The aggregate of a size is every QP's octets and messages over the time from the
//! first QP's start of that size to the last one's end: QPs that do not overlap lower
//! it, never raise it. For the latency tests (each QP its own ping-pong) it is the
//! distribution of every QP's latencies together.

use std::net::{Ipv4Addr, SocketAddrV4};
use std::thread::JoinHandle;
use std::time::Instant;

use control::embedded::{self, MultiPair, ADDR_A, ADDR_B, BENCH_PORT};
use control::verbs::{conn_core, spawn_core, AlignmentStats, Core, Device, Limits};

use super::server::{self, Server, SessionOutcome};
use super::{
    check_options, memory_link, outcome, run_client_elsewhere, wire, BenchError, BenchOptions,
    BenchOutcome, ClientOutcome, ServerResult, STALL,
};
use crate::mpa;
use crate::report::{BwSample, LatSample, QpSamples, Sample};
use hdrhistogram::Histogram;

type ClientThread = (
    &'static str,
    usize,
    JoinHandle<Result<ClientOutcome, BenchError>>,
);
type ServerThread = JoinHandle<Result<Vec<SessionOutcome>, BenchError>>;

fn serve(dev: Device, o: &BenchOptions) -> Result<ServerThread, BenchError> {
    let listener = dev
        .listen(BENCH_PORT, mpa::responder(&o.mpa))
        .map_err(BenchError::Connect)?;
    let qps = o.qps;
    std::thread::Builder::new()
        .name("bench-server".into())
        .spawn(move || {
            // Both ends are this user's: the budget is what the options ask for.
            let budget = server::Budget {
                session: u64::MAX,
                total: u64::MAX,
                sessions: qps,
                pending_per_peer: qps,
            };
            let mut s = Server::new(dev, vec![listener], budget);
            s.run_until_elsewhere(qps as u64, Some(STALL))
        })
        .map_err(|e| BenchError::Thread(e.to_string()))
}

fn clients(
    dir: &'static str,
    dev: &Device,
    server: Ipv4Addr,
    port: u16,
    o: &BenchOptions,
    out: &mut Vec<ClientThread>,
) -> Result<(), BenchError> {
    for q in 0..o.qps {
        let mut oq = o.clone();
        oq.core = Some(q % o.cores);
        oq.progress = false;
        let dev = dev.clone();
        let init = mpa::initiator(&o.mpa);
        let t = std::thread::Builder::new()
            .name(format!("bench-client-{dir}{q}"))
            .spawn(move || run_client_elsewhere(&dev, &oq, SocketAddrV4::new(server, port), init))
            .map_err(|e| BenchError::Thread(e.to_string()))?;
        out.push((dir, q, t));
    }
    Ok(())
}

/// Runs `o` (several QPs, cores or directions) over the embedded default.
pub(super) fn run(o: &BenchOptions) -> Result<BenchOutcome, BenchError> {
    check_options(o)?;
    let MultiPair {
        a,
        cores_a,
        b,
        cores_b,
    } = embedded::pair_cores(
        wire(o, 0),
        wire(o, 1),
        embedded::tcp_config(o.mtu),
        Limits::default(),
        o.cores,
    )
    .map_err(|e| BenchError::Options(e.to_string()))?;
    let threads_a: Vec<_> = cores_a.into_iter().map(spawn_core).collect();
    let threads_b: Vec<_> = cores_b.into_iter().map(spawn_core).collect();
    let mut servers = vec![serve(b.clone(), o)?];
    if o.bidirectional {
        servers.push(serve(a.clone(), o)?);
    }
    let mut cl = Vec::new();
    clients("A", &a, ADDR_B, BENCH_PORT, o, &mut cl)?;
    if o.bidirectional {
        clients("B", &b, ADDR_A, BENCH_PORT, o, &mut cl)?;
    }
    let (results, mut failure) = join_clients(cl);
    // The servers end when their sessions have (or at the stall time after a failed
    // client).
    for s in servers {
        match s.join() {
            Ok(Ok(sessions)) => {
                if let Some(e) = sessions.iter().find_map(|s| s.result.as_ref().err()) {
                    failure.get_or_insert(BenchError::Thread(format!("server: {e}")));
                }
            }
            Ok(Err(e)) => {
                failure.get_or_insert(BenchError::Thread(format!("server: {e}")));
            }
            Err(_) => {
                failure.get_or_insert(BenchError::Thread("server thread panicked".into()));
            }
        }
    }
    let align = |threads: Vec<control::verbs::CoreThread>| {
        let mut sum = AlignmentStats::default();
        for t in threads {
            if let Some(c) = t.stop() {
                sum.merge(&c.alignment());
            }
        }
        sum
    };
    let (al_a, al_b) = (align(threads_a), align(threads_b));
    if let Some(e) = failure {
        return Err(e);
    }
    Ok(assemble(
        o,
        results,
        vec![al_a, al_b],
        format!("{} cores={}", memory_link(o), o.cores),
    ))
}

/// Waits for every client; their outcomes, and the first failure.
fn join_clients(
    cl: Vec<ClientThread>,
) -> (
    Vec<(&'static str, usize, ClientOutcome)>,
    Option<BenchError>,
) {
    let mut results = Vec::new();
    let mut failure = None;
    for (dir, q, t) in cl {
        match t.join() {
            Ok(Ok(c)) => results.push((dir, q, c)),
            Ok(Err(e)) => {
                failure.get_or_insert(BenchError::Thread(format!("QP {dir}{q}: {e}")));
            }
            Err(_) => {
                failure.get_or_insert(BenchError::Thread(format!("QP {dir}{q} panicked")));
            }
        }
    }
    (results, failure)
}

/// The report of a run of several clients: per-QP figures and their aggregate.
fn assemble(
    o: &BenchOptions,
    results: Vec<(&'static str, usize, ClientOutcome)>,
    alignment: Vec<AlignmentStats>,
    link: String,
) -> BenchOutcome {
    let per_qp: Vec<QpSamples> = results
        .iter()
        .map(|(dir, q, c)| QpSamples {
            qp: *q as u64,
            direction: (*dir).into(),
            core: conn_core(c.conn) as u64,
            samples: c.samples.clone(),
        })
        .collect();
    let merged = merge(o, results);
    let mut out = outcome(o, merged, alignment, link);
    out.report.per_qp = per_qp;
    out
}

/// The clients of a run on a device whose cores run on other threads
/// ([`run_clients`]).
#[derive(Debug)]
pub struct ClientRuns(Vec<(&'static str, usize, ClientOutcome)>);

/// `o.qps` clients against `server` on `dev`, each on a thread of its own (QP `q` opens
/// from core `q % o.cores`), while the device's cores run elsewhere (a DPDK node's
/// lcores). Waits for all of them.
pub fn run_clients(
    dev: &Device,
    o: &BenchOptions,
    server: SocketAddrV4,
) -> Result<ClientRuns, BenchError> {
    check_options(o)?;
    let mut cl = Vec::new();
    clients("A", dev, *server.ip(), server.port(), o, &mut cl)?;
    let (results, failure) = join_clients(cl);
    match failure {
        Some(e) => Err(e),
        None => Ok(ClientRuns(results)),
    }
}

/// The report of [`run_clients`], with the cores' segment counters.
pub fn report_clients(
    o: &BenchOptions,
    runs: ClientRuns,
    alignment: AlignmentStats,
    link: String,
) -> BenchOutcome {
    assemble(o, runs.0, vec![alignment], link)
}

/// `o.qps` clients against `server` on `dev`, a device of one core that the calling
/// thread drives meanwhile (a DPDK client node's lcore): each client on a thread of its
/// own. Gives the core back, with the report of the run.
pub fn run_clients_driving(
    dev: &Device,
    mut core: Core,
    o: &BenchOptions,
    server: SocketAddrV4,
    link: String,
) -> (Core, Result<BenchOutcome, BenchError>) {
    let mut cl = Vec::new();
    if let Err(e) = clients("A", dev, *server.ip(), server.port(), o, &mut cl) {
        return (core, Err(e));
    }
    while cl.iter().any(|(_, _, t)| !t.is_finished()) {
        core.poll();
    }
    let (results, failure) = join_clients(cl);
    if let Some(e) = failure {
        return (core, Err(e));
    }
    let al = core.alignment();
    (core, Ok(assemble(o, results, vec![al], link)))
}

/// The aggregate of several clients' outcomes (see the module docs).
fn merge(o: &BenchOptions, results: Vec<(&'static str, usize, ClientOutcome)>) -> ClientOutcome {
    let mut samples = Vec::new();
    let mut spans = Vec::new();
    let mut histograms = Vec::new();
    for (k, &size) in o.sizes.iter().enumerate() {
        let (mut iterations, mut first, mut last) = (0u64, None::<Instant>, None::<Instant>);
        let mut hist: Option<Histogram<u64>> = None;
        for (_, _, c) in &results {
            if let Some(Sample::Bw(b)) = c.samples.get(k) {
                iterations += b.iterations;
            }
            if let Some((_, h)) = c.histograms.iter().find(|(s, _)| *s == size) {
                match hist.as_mut() {
                    Some(all) => {
                        // Both auto-resize: adding cannot fail.
                        let _ = all.add(h);
                    }
                    None => hist = Some(h.clone()),
                }
            }
            if let Some(&(s, e)) = c.spans.get(k) {
                first = Some(first.map_or(s, |f| f.min(s)));
                last = Some(last.map_or(e, |l| l.max(e)));
            }
        }
        let (s, e) = match (first, last) {
            (Some(s), Some(e)) => (s, e),
            _ => {
                let now = Instant::now();
                (now, now)
            }
        };
        // Latency tests: every QP's latencies in one distribution.
        match hist {
            Some(h) if o.test.is_latency() => {
                samples.push(Sample::Lat(LatSample::from_histogram(size as u64, &h)));
                histograms.push((size, h));
            }
            _ => samples.push(Sample::Bw(BwSample::from_elapsed(
                size as u64,
                iterations,
                e.duration_since(s),
            ))),
        }
        spans.push((s, e));
    }
    let mut server = ServerResult::default();
    let (mut client_verified, mut client_errors, mut expected) = (0, 0, 0);
    let conn = results.first().map_or(0, |(_, _, c)| c.conn);
    for (_, _, c) in results {
        server.verified += c.server.verified;
        server.errors += c.server.errors;
        client_verified += c.client_verified;
        client_errors += c.client_errors;
        expected += c.expected_verified;
    }
    ClientOutcome {
        samples,
        spans,
        conn,
        histograms,
        intervals: Vec::new(),
        server,
        client_verified,
        client_errors,
        expected_verified: expected,
    }
}
