//! `iwarp bench`: a perftest-like run, both ends in this process over the in-memory link
//! or, with `--config`, a client on a DPDK port against `iwarp serve` (or perftest with
//! `--perftest`, [`super::perftest`]).

use std::net::SocketAddrV4;
use std::path::PathBuf;

use clap::Args;
use control::embedded::FaultConfig;
use iwarp::bench::{self, BenchOptions, BenchOutcome, Length, Test};
use iwarp::mpa::{self, MpaFlags};

use super::{load_config, parse_peer};

/// `iwarp bench`'s arguments.
#[derive(Args)]
pub struct BenchArgs {
    /// Which test.
    #[arg(value_enum)]
    pub test: Test,
    /// Message size in octets.
    #[arg(short = 's', long, default_value_t = 65536)]
    pub size: usize,
    /// Run every size from 2 octets to 8 MiB in powers of two (perftest's -a).
    #[arg(short = 'a', long)]
    pub all_sizes: bool,
    /// Messages (round trips for latency tests) per size.
    #[arg(short = 'n', long, conflicts_with = "duration")]
    pub iters: Option<u64>,
    /// Run each size for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long)]
    pub duration: Option<f64>,
    /// Messages kept in flight by bandwidth tests.
    #[arg(short = 't', long, default_value_t = 128)]
    pub tx_depth: usize,
    /// IP MTU of the link (576 to 9000).
    #[arg(long, default_value_t = 1500)]
    pub mtu: usize,
    /// MPA policy flags (on top of the file's `[mpa]` with --config).
    #[command(flatten)]
    pub mpa: MpaFlags,
    /// Run as a client on a DPDK port from this deployment file against `--peer`.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// The server (`iwarp serve`), as ADDR or ADDR:PORT (port 18515 if left out).
    /// Default: the file's [bench] peer.
    #[arg(long, value_name = "ADDR", requires = "config")]
    pub peer: Option<String>,
    /// The `[[ports]]` entry to use (default: the file's [bench] port_name, else the port
    /// whose prefix holds the peer).
    #[arg(long, value_name = "NAME", requires = "config")]
    pub port_name: Option<String>,
    /// Probability that a frame is lost: on the in-memory link, both directions; with
    /// --config, what this client's DPDK port transmits (the same for the fault flags below).
    #[arg(long, default_value_t = 0.0)]
    pub loss: f64,
    /// Probability that a frame is held back and overtaken.
    #[arg(long, default_value_t = 0.0)]
    pub reorder: f64,
    /// Probability that a frame is duplicated.
    #[arg(long, default_value_t = 0.0)]
    pub duplicate: f64,
    /// Probability that a TCP segment is split in two or three.
    #[arg(long, default_value_t = 0.0)]
    pub resegment: f64,
    /// Probability that a frame has a bit flipped (the TCP/IP checksums catch it).
    #[arg(long, default_value_t = 0.0)]
    pub corrupt: f64,
    /// Seed of the fault decisions (a failing run can be replayed).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Check every octet received.
    #[arg(long)]
    pub verify: bool,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the latency histogram (last size) to FILE in HdrHistogram's percentile format.
    #[arg(long, value_name = "FILE")]
    pub hgrm: Option<PathBuf>,
    /// Speak perftest's `-R` (rdma_cm) exchange instead of our own: a client against
    /// `ib_write_bw|ib_read_bw|ib_send_bw -R` (with --config and --peer), or with --server
    /// a server for their clients. Both sides need the same -s and -n.
    #[arg(long, requires = "config")]
    pub perftest: bool,
    /// With --perftest: serve one perftest client (on the --peer port, default 18515).
    #[arg(long, requires = "perftest")]
    pub server: bool,
    /// With --perftest send-bw: the receive depth (perftest's -r; default 512, or -n when
    /// smaller).
    #[arg(long, requires = "perftest")]
    pub rx_depth: Option<u64>,
    /// With --perftest: seconds any one step may take (and the server's wait for a client).
    #[arg(long, default_value_t = 60.0)]
    pub timeout: f64,
}

/// The options of an `iwarp bench` run from its arguments (the MPA policy without a
/// deployment file: [`mpa::bench_default`] under the flags).
fn options(a: &BenchArgs) -> Result<BenchOptions, String> {
    let test = a.test;
    let length = match (a.iters, a.duration) {
        (_, Some(d)) if !(d > 0.0 && d.is_finite()) => {
            return Err(format!(
                "--duration must be a positive number of seconds, not {d}"
            ))
        }
        (_, Some(d)) => Length::Duration(std::time::Duration::from_secs_f64(d)),
        (Some(0), _) => return Err("--iters must be at least 1".into()),
        (Some(n), _) => Length::Iterations(n),
        (None, None) => Length::Iterations(if test.is_latency() { 10_000 } else { 5_000 }),
    };
    if !(576..=9000).contains(&a.mtu) {
        return Err(format!("--mtu must be within 576..=9000, not {}", a.mtu));
    }
    for (name, p) in [
        ("--loss", a.loss),
        ("--reorder", a.reorder),
        ("--duplicate", a.duplicate),
        ("--resegment", a.resegment),
        ("--corrupt", a.corrupt),
    ] {
        if !(0.0..=0.5).contains(&p) {
            return Err(format!(
                "{name} must be a probability within 0..=0.5, not {p}"
            ));
        }
    }
    Ok(BenchOptions {
        test,
        sizes: if a.all_sizes {
            bench::all_sizes()
        } else {
            vec![a.size]
        },
        length,
        tx_depth: a.tx_depth,
        mtu: a.mtu,
        mpa: a.mpa.applied(&mpa::bench_default()),
        faults: FaultConfig {
            loss: a.loss,
            reorder: a.reorder,
            duplicate: a.duplicate,
            resegment: a.resegment,
            corrupt: a.corrupt,
            seed: a.seed,
            ..FaultConfig::default()
        },
        verify: a.verify,
        progress: !a.json,
    })
}

/// Runs `iwarp bench`: true when every octet was verified (or nothing was to be).
pub fn run(a: BenchArgs) -> Result<bool, String> {
    if a.perftest {
        return super::perftest::run(&a);
    }
    let opts = options(&a)?;
    let out = match &a.config {
        None => bench::run_embedded(&opts).map_err(|e| e.to_string())?,
        Some(path) => {
            if a.mtu != 1500 {
                return Err(
                    "--mtu applies to the in-memory link only; with --config the MTU is the \
                     port's `mtu`"
                        .into(),
                );
            }
            on_config(path, &a, opts)?
        }
    };
    print(&a, &out)?;
    Ok(out.verify_errors == 0 && out.verified_octets == out.expected_octets)
}

fn print(a: &BenchArgs, out: &BenchOutcome) -> Result<(), String> {
    if a.json {
        print!("{}", iwarp::report::to_json(&out.report));
    } else {
        print!("{}", iwarp::report::to_text(&out.report));
        let c = out.alignment[0];
        print!(
            " FPDU-aligned segments: client new {:.4} rtx {:.4} ({} retransmitted octets)",
            c.new_whole_ratio(),
            c.rtx_whole_ratio(),
            c.retransmitted_octets,
        );
        match out.alignment.get(1) {
            Some(s) => println!(", server new {:.4}", s.new_whole_ratio()),
            None => println!(),
        }
        if a.verify {
            println!(
                " verified {} octets of {} moved, {} wrong",
                out.verified_octets, out.expected_octets, out.verify_errors
            );
        }
    }
    if let (Some(path), Some(h)) = (&a.hgrm, &out.histogram) {
        let mut f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        iwarp::report::write_hgrm(h, &mut f, 1000.0)
            .map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}

/// The peer (`--peer`, else the file's `[bench] peer`; none for a `server`, which must
/// not need one) and the port to use (`--port-name`, else the file's `[bench] port_name`,
/// else the one whose prefix holds the peer) of a run on a deployment file.
pub fn target(
    a: &BenchArgs,
    cfg: &appconfig::Config,
    path: &std::path::Path,
    default_port: u16,
    server: bool,
) -> Result<(Option<SocketAddrV4>, usize), String> {
    let peer = match (&a.peer, &cfg.bench) {
        (Some(p), _) => Some(parse_peer(p, default_port)?),
        (None, Some(b)) if !server => Some(b.peer),
        _ => None,
    };
    if !server && peer.is_none() {
        return Err(format!(
            "{}: no peer: give --peer or a [bench] peer",
            path.display()
        ));
    }
    let name = a
        .port_name
        .clone()
        .or_else(|| cfg.bench.as_ref().and_then(|b| b.port_name.clone()));
    let near = if server { None } else { peer.map(|p| *p.ip()) };
    let port = iwarp::deploy::select_port(cfg, name.as_deref(), near)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((peer, port))
}

/// `iwarp bench --config FILE`: the client on the file's DPDK port, with the file's
/// `[mpa]` under the flags.
fn on_config(
    path: &std::path::Path,
    a: &BenchArgs,
    mut opts: BenchOptions,
) -> Result<BenchOutcome, String> {
    let cfg = load_config(path)?;
    let (peer, port) = target(a, &cfg, path, control::embedded::BENCH_PORT, false)?;
    let peer = peer.unwrap_or_else(|| unreachable!("a client has a peer"));
    opts.mpa = a.mpa.applied(&cfg.mpa);
    let p = &cfg.ports[port];
    let link = format!("{} {} mtu={}", p.driver.as_str(), p.name, p.mtu);
    opts.mtu = usize::from(p.mtu);
    // Faults go on what this client's port transmits (the server's frames arrive as they
    // were sent).
    let node =
        iwarp::deploy::open_with_faults(&cfg, port, bench::direction_faults(&opts.faults, 0))
            .map_err(|e| e.to_string())?;
    let o = opts.clone();
    let init = mpa::initiator(&opts.mpa);
    let (core, r) = node
        .run(move |dev, core| bench::run_client(&dev, core, &o, peer, init))
        .map_err(|e| e.to_string())?;
    let client = r.map_err(|e| e.to_string())?;
    Ok(bench::outcome(&opts, client, vec![core.alignment()], link))
}
