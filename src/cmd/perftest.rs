//! `iwarp bench TEST --perftest --config FILE [--peer ADDR | --server]`: perftest's `-R`
//! exchange against `ib_write_bw`, `ib_read_bw`, `ib_send_bw`, `ib_write_lat`,
//! `ib_read_lat` or `ib_send_lat`, either role.

use std::io::Write;
use std::net::SocketAddrV4;

use iwarp::mpa;
use iwarp::perftest::{self, PerftestOptions, PerftestOutcome};

use super::bench::BenchArgs;
use super::{load_config, seconds};

/// Where a perftest run goes: the node's port, the client's peer (none for a server).
struct Plan {
    cfg: appconfig::Config,
    port: usize,
    peer: Option<SocketAddrV4>,
    options: PerftestOptions,
    mac: [u8; 6],
}

/// The options and the port of a perftest run from the arguments and the file.
fn plan(a: &BenchArgs) -> Result<Plan, String> {
    let path = a.config.as_ref().ok_or("--perftest needs --config FILE")?;
    // What perftest's exchange cannot carry is refused, never ignored.
    for (given, flag, why) in [
        (
            a.all_sizes,
            "-a",
            "perftest's -R exchange runs one size per connection",
        ),
        (
            a.verify,
            "--verify",
            "perftest's buffers hold no pattern to check",
        ),
        (
            a.hgrm.is_some() && !a.test.is_latency(),
            "--hgrm",
            "a bandwidth test has no latency histogram",
        ),
        (
            a.max_lat_p99.is_some() && !a.test.is_latency(),
            "--max-lat-p99",
            "a bandwidth test measures no latency",
        ),
        (
            (a.hgrm.is_some() || a.max_lat_p99.is_some() || a.plot.is_some())
                && a.server
                && a.test == iwarp::bench::Test::ReadLat,
            "--hgrm, --max-lat-p99 or --plot as the read-lat server",
            "perftest's read_lat server measures nothing (the client times its Reads)",
        ),
        (
            a.post_list > 1,
            "-l",
            "post lists are not in the perftest exchange yet",
        ),
        (
            a.cq_mod.is_some_and(|q| q > 1),
            "-Q",
            "completion moderation is not in the perftest exchange yet",
        ),
        (
            a.interval.is_some() || a.run_infinitely,
            "--interval/--run-infinitely",
            "perftest's -R exchange reports one result at the end",
        ),
        (
            a.mtu != 1500,
            "--mtu",
            "with --config the MTU is the port's `mtu`",
        ),
    ] {
        if given {
            return Err(format!("--perftest does not take {flag}: {why}"));
        }
    }
    let timeout = seconds("--timeout", a.timeout)?;
    let cfg = load_config(path)?;
    let (peer, port) = super::bench::target(a, &cfg, path, perftest::DEFAULT_PORT, a.server)?;
    let policy = a.mpa.applied(&cfg.mpa);
    let iters = match (a.iters, a.duration) {
        (_, Some(_)) => return Err("--perftest runs a number of iterations (-n), not -D".into()),
        (Some(n), _) => n,
        (None, None) => 1000,
    };
    let p = &cfg.ports[port];
    let initiator = mpa::initiator(&policy);
    // The test connection asks what the flags give, else perftest's own values.
    let ird_ord =
        (a.mpa.ird().is_some() || a.mpa.ord().is_some()).then_some((initiator.ird, initiator.ord));
    let options = PerftestOptions {
        test: a.test,
        size: a.size(),
        iters,
        tx_depth: a.tx_depth,
        rx_depth: a.rx_depth,
        ird_ord,
        initiator,
        responder: mpa::responder(&policy),
        accept: a.mpa.accept(),
        step_timeout: timeout,
        accept_timeout: Some(timeout),
        mpa_label: format!("perftest -R, {}", mpa::label(&policy)),
        link_label: format!("{} {} mtu={}", p.driver.as_str(), p.name, p.mtu),
    };
    perftest::validate_options(&options).map_err(|e| e.to_string())?;
    let mac = p.mac.map_or([0; 6], |m| m.0);
    Ok(Plan {
        cfg,
        port,
        peer,
        options,
        mac,
    })
}

/// Runs the perftest exchange: true when it completed.
pub fn run(a: &BenchArgs) -> Result<bool, String> {
    let Plan {
        cfg,
        port,
        peer,
        options: o,
        mac,
    } = plan(a)?;
    // Faults go on what this side's port transmits.
    let faults = iwarp::bench::direction_faults(&super::bench::faults(a), 0);
    let node = iwarp::deploy::open_with_faults(&cfg, port, faults).map_err(|e| e.to_string())?;
    let server = a.server;
    let listen_port = peer.map_or(perftest::DEFAULT_PORT, |p| p.port());
    let r = node
        .run(move |dev, mut core| {
            let r = match peer {
                Some(to) if !server => perftest::run_client(&dev, &mut core, to, &o, mac),
                _ => match dev.listen(listen_port, o.responder.clone()) {
                    Ok(l) => {
                        println!(
                            "************************************\n\
                             * Waiting for client to connect... *\n\
                             ************************************"
                        );
                        let _ = std::io::stdout().flush();
                        perftest::run_server(&dev, &mut core, &l, &o, mac)
                    }
                    Err(e) => Err(perftest::PerftestError::Connect(e)),
                },
            };
            dev.shutdown();
            r
        })
        .map_err(|e| e.to_string())?;
    let mut out = r.map_err(|e| e.to_string())?;
    let passed = super::bench::finish_report(a, &mut out.report);
    print(a, &out, server);
    let histograms: Vec<(usize, hdrhistogram::Histogram<u64>)> = out
        .histogram
        .iter()
        .map(|h| (a.size(), h.clone()))
        .collect();
    if let Some(path) = &a.plot {
        super::bench::plot(path, &out.report, &histograms)?;
    }
    if let Some(path) = &a.hgrm {
        super::bench::write_hgrms(path, &histograms)?;
    }
    Ok(passed)
}

fn print(a: &BenchArgs, out: &PerftestOutcome, server: bool) {
    if a.json || a.output.is_some() {
        super::bench::print_report(a, &out.report);
        return;
    }
    let (ird, ord) = out.test_conn.as_ref().map_or((0, 0), |c| (c.ird, c.ord));
    println!(
        " perftest peer version {}, test QP: IRD {ird} ORD {ord} (peer {} IRD {} ORD {}), \
         peer QPN {:#06x}",
        out.peer_version,
        if server { "asked" } else { "answered" },
        out.peer_ird_ord.0,
        out.peer_ird_ord.1,
        out.peer_dest.qpn
    );
    if out.sample.is_none() {
        println!(" served the client's RDMA Reads (perftest's read_lat server measures nothing)");
    }
    super::bench::print_report(a, &out.report);
}
