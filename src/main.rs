//! `iwarp`: the iWARP appliance command line.
//!
//! * `iwarp bench`: perftest-like RDMA Write/Read/Send bandwidth and latency runs; without
//!   a config file both ends run in this process over the in-memory link.
//! * `iwarp decode`: decode one half connection of an iWARP byte stream (MPA startup
//!   frame, FPDUs with CRC and marker checks, DDP/RDMAP headers), or every iWARP connection
//!   of a pcap capture (`--pcap`).
//! * `iwarp rping`: rdma-core's rping, client or server (see [`iwarp::rping`]).
#![forbid(unsafe_code)]

mod decode;
mod pcap;
mod ulpdu;

use std::io::{Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use wire::mpa::fpdu::FpduMode;

#[derive(Parser)]
#[command(
    name = "iwarp",
    version,
    about = "Userspace iWARP (RDMAP/DDP/MPA over TCP)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a perftest-like benchmark: both ends in this process over the in-memory link,
    /// or, with --config, a client on a DPDK port against an `iwarp serve`.
    Bench(BenchArgs),
    /// Serve `iwarp bench` clients on a DPDK port described by a deployment file.
    Serve(ServeArgs),
    /// Decode one half connection's byte stream: MPA startup frame, FPDUs, DDP/RDMAP.
    Decode(DecodeArgs),
    /// rdma-core's rping (client -c or server -s), wire-compatible with the real tool.
    Rping(RpingArgs),
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("role").args(["server", "client"])))]
struct RpingArgs {
    /// Server side.
    #[arg(short = 's')]
    server: bool,
    /// Client side.
    #[arg(short = 'c')]
    client: bool,
    /// Address: the server's (client), or the one to listen on (server).
    #[arg(short = 'a', value_name = "ADDR")]
    addr: Option<std::net::Ipv4Addr>,
    /// TCP port.
    #[arg(short = 'p', default_value_t = iwarp::rping::DEFAULT_PORT)]
    port: u16,
    /// Ping count (0: until interrupted).
    #[arg(short = 'C', default_value_t = 0)]
    count: u64,
    /// Ping data size.
    #[arg(short = 'S', default_value_t = iwarp::rping::DEFAULT_SIZE)]
    size: usize,
    /// Display ping data.
    #[arg(short = 'v')]
    verbose: bool,
    /// Validate ping data.
    #[arg(short = 'V')]
    validate: bool,
    /// Persistent server: serve clients one after the other.
    #[arg(short = 'P')]
    persistent: bool,
    /// MPA CRC off (requested by default).
    #[arg(long)]
    no_crc: bool,
    /// Client: peer-to-peer model with this RTR (RFC 6581).
    #[arg(long, value_enum)]
    p2p: Option<RtrName>,
    /// Client: MPA Rev 1 Request (no IRD/ORD negotiation; a siw rping server then cannot
    /// RDMA Read).
    #[arg(long, conflicts_with = "p2p")]
    rev1: bool,
    /// Client: IRD to ask for (rping asks 1). Server: the least IRD to accept with
    /// (default: inherit the Request's, like `rdma_accept(id, NULL)`).
    #[arg(long)]
    ird: Option<u16>,
    /// Client: ORD to ask for (rping asks 1). Server: the most ORD to accept with.
    #[arg(long)]
    ord: Option<u16>,
    /// Seconds any one step may take.
    #[arg(long, default_value_t = 30.0)]
    timeout: f64,
    /// Deployment file selecting the device (DPDK port); without it both ends run in this
    /// process over the in-memory link.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
}

#[derive(Args)]
#[command(group(clap::ArgGroup::new("input").required(true).args(["hex", "bin", "pcap"])))]
struct DecodeArgs {
    /// Read the stream as hex text from FILE ("-" for standard input); white space,
    /// ':' and '-' separators and '#' comments are ignored.
    #[arg(long, value_name = "FILE")]
    hex: Option<PathBuf>,
    /// Read the stream as raw octets from FILE ("-" for standard input).
    #[arg(long, value_name = "FILE")]
    bin: Option<PathBuf>,
    /// Read a libpcap capture from FILE ("-" for standard input): every TCP connection is
    /// reassembled per direction, its MPA Request and Reply found and both directions
    /// decoded in the mode they negotiated (implies --startup; --markers/--crc not used).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["startup", "markers", "crc"])]
    pcap: Option<PathBuf>,
    /// The stream begins with an MPA Request or Reply; the marker origin is the octet
    /// after it. Without it the stream starts at the marker origin.
    #[arg(long)]
    startup: bool,
    /// This half connection carries markers (the other side set M).
    #[arg(long)]
    markers: bool,
    /// CRC is in use on this connection (either side set C): check every FPDU's CRC.
    #[arg(long)]
    crc: bool,
    /// One JSON object per line instead of the readable listing.
    #[arg(long)]
    json: bool,
}

#[derive(Args)]
struct ServeArgs {
    /// The deployment file (TOML; see config/README.md).
    #[arg(long, value_name = "FILE")]
    config: PathBuf,
    /// The `[[ports]]` entry to serve on (default: the only port, or the listeners' port).
    #[arg(long, value_name = "NAME")]
    port_name: Option<String>,
    /// Exit after this many sessions (default: serve until killed).
    #[arg(long, value_name = "N")]
    count: Option<u64>,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum TestName {
    WriteBw,
    WriteLat,
    ReadBw,
    ReadLat,
    SendBw,
    SendLat,
}

#[derive(Clone, Copy, clap::ValueEnum)]
enum RtrName {
    Write,
    Read,
    Send,
}

impl From<RtrName> for control::verbs::RtrType {
    fn from(r: RtrName) -> Self {
        match r {
            RtrName::Write => Self::Write,
            RtrName::Read => Self::Read,
            RtrName::Send => Self::Send,
        }
    }
}

/// The command line's MPA flags on top of a deployment file's Initiator policy.
fn apply_mpa_flags(
    init: &mut control::verbs::InitiatorConfig,
    markers: bool,
    no_crc: bool,
    rev1: bool,
    rtr: Option<control::verbs::RtrType>,
) {
    if markers {
        init.markers = true;
    }
    if no_crc {
        init.crc = false;
    }
    if rev1 {
        init.enhanced = false;
        init.peer_to_peer = false;
    }
    if let Some(t) = rtr {
        init.peer_to_peer = true;
        init.rtr_types = control::verbs::RtrTypes::NONE.with(t);
        init.rtr_preference = [t, t, t];
    }
}

#[derive(Args)]
struct BenchArgs {
    /// Which test.
    #[arg(value_enum)]
    test: TestName,
    /// Message size in octets.
    #[arg(short = 's', long, default_value_t = 65536)]
    size: usize,
    /// Run every size from 2 octets to 8 MiB in powers of two (perftest's -a).
    #[arg(short = 'a', long)]
    all_sizes: bool,
    /// Messages (round trips for latency tests) per size.
    #[arg(short = 'n', long, conflicts_with = "duration")]
    iters: Option<u64>,
    /// Run each size for this many seconds instead of a number of iterations.
    #[arg(short = 'D', long)]
    duration: Option<f64>,
    /// Messages kept in flight by bandwidth tests.
    #[arg(short = 't', long, default_value_t = 128)]
    tx_depth: usize,
    /// IP MTU of the link (576 to 9000).
    #[arg(long, default_value_t = 1500)]
    mtu: usize,
    /// MPA markers on.
    #[arg(long)]
    markers: bool,
    /// MPA CRC off (it is on by default).
    #[arg(long)]
    no_crc: bool,
    /// MPA Rev 1 startup (no IRD/ORD negotiation, no peer-to-peer).
    #[arg(long, conflicts_with = "p2p")]
    rev1: bool,
    /// Peer-to-peer model with this RTR (RFC 6581).
    #[arg(long, value_enum)]
    p2p: Option<RtrName>,
    /// IRD and ORD to ask for (default 16, or the file's [mpa] ird/ord with --config).
    #[arg(long)]
    ird_ord: Option<u16>,
    /// Run as a client on a DPDK port from this deployment file against `--peer`.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The server (`iwarp serve`), as ADDR or ADDR:PORT (port 18515 if left out).
    /// Default: the file's [bench] peer.
    #[arg(long, value_name = "ADDR", requires = "config")]
    peer: Option<String>,
    /// The `[[ports]]` entry to use (default: the file's [bench] port_name, else the port
    /// whose prefix holds the peer).
    #[arg(long, value_name = "NAME", requires = "config")]
    port_name: Option<String>,
    /// Probability that the wire loses a frame (both directions).
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Probability that a frame is held back and overtaken.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// Probability that a frame is duplicated.
    #[arg(long, default_value_t = 0.0)]
    duplicate: f64,
    /// Probability that a TCP segment is split in two or three.
    #[arg(long, default_value_t = 0.0)]
    resegment: f64,
    /// Probability that a frame has a bit flipped (the TCP/IP checksums catch it).
    #[arg(long, default_value_t = 0.0)]
    corrupt: f64,
    /// Seed of the fault decisions (a failing run can be replayed).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Check every octet received.
    #[arg(long)]
    verify: bool,
    /// Print the results as JSON.
    #[arg(long)]
    json: bool,
    /// Write the latency histogram (last size) to FILE in HdrHistogram's percentile format.
    #[arg(long, value_name = "FILE")]
    hgrm: Option<PathBuf>,
    /// Speak perftest's `-R` (rdma_cm) exchange instead of our own: a client against
    /// `ib_write_bw|ib_read_bw|ib_send_bw -R` (with --config and --peer), or with --server
    /// a server for their clients. Both sides need the same -s and -n.
    #[arg(long, requires = "config")]
    perftest: bool,
    /// With --perftest: serve one perftest client (on the --peer port, default 18515).
    #[arg(long, requires = "perftest")]
    server: bool,
    /// With --perftest send-bw: the receive depth (perftest's -r; default 512, or -n when
    /// smaller).
    #[arg(long, requires = "perftest")]
    rx_depth: Option<u64>,
    /// With --perftest: seconds any one step may take (and the server's wait for a client).
    #[arg(long, default_value_t = 60.0)]
    timeout: f64,
}

fn run_bench(a: BenchArgs) -> Result<bool, String> {
    use iwarp::bench::{self, BenchOptions, Faults, Length, MpaMode, Test};
    if a.perftest {
        return run_perftest(&a);
    }
    let test = match a.test {
        TestName::WriteBw => Test::WriteBw,
        TestName::WriteLat => Test::WriteLat,
        TestName::ReadBw => Test::ReadBw,
        TestName::ReadLat => Test::ReadLat,
        TestName::SendBw => Test::SendBw,
        TestName::SendLat => Test::SendLat,
    };
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
    let sizes = if a.all_sizes {
        bench::all_sizes()
    } else {
        vec![a.size]
    };
    let opts = BenchOptions {
        test,
        sizes,
        length,
        tx_depth: a.tx_depth,
        mtu: a.mtu,
        mpa: MpaMode {
            markers: a.markers,
            crc: !a.no_crc,
            rev1: a.rev1,
            rtr: a.p2p.map(Into::into),
        },
        ird_ord: a.ird_ord.unwrap_or(16),
        faults: Faults {
            loss: a.loss,
            reorder: a.reorder,
            duplicate: a.duplicate,
            resegment: a.resegment,
            corrupt: a.corrupt,
            seed: a.seed,
        },
        verify: a.verify,
        progress: !a.json,
    };
    let out = match &a.config {
        None => bench::run_embedded(&opts).map_err(|e| e.to_string())?,
        Some(path) => {
            if [a.loss, a.reorder, a.duplicate, a.resegment, a.corrupt]
                .iter()
                .any(|&p| p > 0.0)
                || a.mtu != 1500
            {
                return Err(
                    "--mtu and fault injection apply to the in-memory link only; with --config \
                     the MTU is the port's `mtu`"
                        .into(),
                );
            }
            bench_on_config(path, &a, opts)?
        }
    };
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
    Ok(out.verify_errors == 0 && out.verified_octets == out.expected_octets)
}

fn load_config(path: &std::path::Path) -> Result<appconfig::Config, String> {
    appconfig::load(path).map_err(|e| e.to_string())
}

/// `iwarp bench --config FILE`: the client on the file's DPDK port.
fn bench_on_config(
    path: &std::path::Path,
    a: &BenchArgs,
    mut opts: iwarp::bench::BenchOptions,
) -> Result<iwarp::bench::BenchOutcome, String> {
    use std::net::{Ipv4Addr, SocketAddrV4};
    let cfg = load_config(path)?;
    let peer = match (&a.peer, &cfg.bench) {
        (Some(p), _) => match p.parse::<SocketAddrV4>() {
            Ok(s) => s,
            Err(_) => SocketAddrV4::new(
                p.parse::<Ipv4Addr>()
                    .map_err(|_| format!("--peer {p:?} is not ADDR or ADDR:PORT"))?,
                control::embedded::BENCH_PORT,
            ),
        },
        (None, Some(b)) => b.peer,
        (None, None) => {
            return Err(format!(
                "{}: no peer: give --peer or a [bench] peer",
                path.display()
            ))
        }
    };
    let name = a
        .port_name
        .clone()
        .or_else(|| cfg.bench.as_ref().and_then(|b| b.port_name.clone()));
    let port = iwarp::deploy::select_port(&cfg, name.as_deref(), Some(*peer.ip()))
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut mpa = iwarp::deploy::initiator_config(&cfg.mpa);
    apply_mpa_flags(&mut mpa, a.markers, a.no_crc, a.rev1, opts.mpa.rtr);
    if let Some(n) = a.ird_ord {
        mpa.ird = n;
        mpa.ord = n;
    }
    opts.mpa = iwarp::bench::MpaMode {
        markers: mpa.markers,
        crc: mpa.crc,
        rev1: !mpa.enhanced,
        rtr: mpa.peer_to_peer.then_some(mpa.rtr_preference[0]),
    };
    opts.ird_ord = mpa.ord;
    let p = &cfg.ports[port];
    let link = format!("{} {} mtu={}", p.driver.as_str(), p.name, p.mtu);
    opts.mtu = usize::from(p.mtu);
    let node = iwarp::deploy::open(&cfg, port).map_err(|e| e.to_string())?;
    let o = opts.clone();
    let (core, r) = node
        .run(move |dev, core| iwarp::bench::run_client(&dev, core, &o, peer, mpa))
        .map_err(|e| e.to_string())?;
    let client = r.map_err(|e| e.to_string())?;
    Ok(iwarp::bench::outcome(
        &opts,
        client,
        vec![core.alignment()],
        link,
    ))
}

fn test_of(t: TestName) -> iwarp::bench::Test {
    use iwarp::bench::Test;
    match t {
        TestName::WriteBw => Test::WriteBw,
        TestName::WriteLat => Test::WriteLat,
        TestName::ReadBw => Test::ReadBw,
        TestName::ReadLat => Test::ReadLat,
        TestName::SendBw => Test::SendBw,
        TestName::SendLat => Test::SendLat,
    }
}

/// `iwarp bench TEST --perftest --config FILE [--peer ADDR | --server]`.
fn run_perftest(a: &BenchArgs) -> Result<bool, String> {
    use iwarp::perftest::{self, PerftestOptions};
    use std::net::{Ipv4Addr, SocketAddrV4};
    let path = a.config.as_ref().ok_or("--perftest needs --config FILE")?;
    if !(a.timeout > 0.0 && a.timeout.is_finite()) {
        return Err(format!(
            "--timeout must be a positive number of seconds, not {}",
            a.timeout
        ));
    }
    let cfg = load_config(path)?;
    let peer: Option<SocketAddrV4> = match (&a.peer, &cfg.bench) {
        (Some(p), _) => Some(match p.parse::<SocketAddrV4>() {
            Ok(s) => s,
            Err(_) => SocketAddrV4::new(
                p.parse::<Ipv4Addr>()
                    .map_err(|_| format!("--peer {p:?} is not ADDR or ADDR:PORT"))?,
                perftest::DEFAULT_PORT,
            ),
        }),
        (None, Some(b)) if !a.server => Some(b.peer),
        _ => None,
    };
    if !a.server && peer.is_none() {
        return Err(format!(
            "{}: no peer: give --peer or a [bench] peer",
            path.display()
        ));
    }
    let name = a
        .port_name
        .clone()
        .or_else(|| cfg.bench.as_ref().and_then(|b| b.port_name.clone()));
    let port = iwarp::deploy::select_port(
        &cfg,
        name.as_deref(),
        if a.server {
            None
        } else {
            peer.map(|p| *p.ip())
        },
    )
    .map_err(|e| format!("{}: {e}", path.display()))?;
    let mut init = iwarp::deploy::initiator_config(&cfg.mpa);
    apply_mpa_flags(
        &mut init,
        a.markers,
        a.no_crc,
        a.rev1,
        a.p2p.map(Into::into),
    );
    let mut resp = iwarp::deploy::responder_config(&cfg.mpa);
    if a.markers {
        resp.markers = true;
    }
    if a.no_crc {
        resp.crc = false;
    }
    let mut accept = control::verbs::AcceptParams::default();
    if let Some(n) = a.ird_ord {
        init.ird = n;
        init.ord = n;
        accept.ird = n;
        accept.ord = n;
    }
    let iters = match (a.iters, a.duration) {
        (_, Some(_)) => return Err("--perftest runs a number of iterations (-n), not -D".into()),
        (Some(n), _) => n,
        (None, None) => 1000,
    };
    let p = &cfg.ports[port];
    let mac = p.mac.map_or([0; 6], |m| m.0);
    let o = PerftestOptions {
        test: test_of(a.test),
        size: a.size,
        iters,
        tx_depth: a.tx_depth,
        rx_depth: a.rx_depth,
        ird_ord: a.ird_ord.map(|n| (n, n)),
        initiator: init.clone(),
        responder: resp,
        accept,
        step_timeout: std::time::Duration::from_secs_f64(a.timeout),
        accept_timeout: Some(std::time::Duration::from_secs_f64(a.timeout)),
        mpa_label: format!(
            "perftest -R, rev{} markers={} crc={}{}",
            if init.enhanced { 2 } else { 1 },
            if init.markers { "on" } else { "off" },
            if init.crc { "on" } else { "off" },
            if init.peer_to_peer { " p2p" } else { "" }
        ),
        link_label: format!("{} {} mtu={}", p.driver.as_str(), p.name, p.mtu),
    };
    perftest::validate_options(&o).map_err(|e| e.to_string())?;
    let node = iwarp::deploy::open(&cfg, port).map_err(|e| e.to_string())?;
    let server = a.server;
    let listen_port = peer.map_or(perftest::DEFAULT_PORT, |p| p.port());
    let json = a.json;
    let r = node
        .run(move |dev, mut core| {
            let r = if server {
                match dev.listen(listen_port, o.responder.clone()) {
                    Ok(l) => {
                        println!(
                            "************************************\n* Waiting for client to connect... *\n************************************"
                        );
                        let _ = std::io::stdout().flush();
                        perftest::run_server(&dev, &mut core, &l, &o, mac)
                    }
                    Err(e) => Err(perftest::PerftestError::Connect(e)),
                }
            } else {
                perftest::run_client(&dev, &mut core, peer.unwrap_or_else(|| unreachable!()), &o, mac)
            };
            dev.shutdown();
            r
        })
        .map_err(|e| e.to_string())?;
    let out = r.map_err(|e| e.to_string())?;
    if json {
        print!("{}", iwarp::report::to_json(&out.report));
    } else {
        let (ird, ord) = out.test_conn.as_ref().map_or((0, 0), |c| (c.ird, c.ord));
        println!(
            " perftest peer version {}, test QP: IRD {ird} ORD {ord} (peer {} IRD {} ORD {}), peer QPN {:#06x}",
            out.peer_version,
            if server { "asked" } else { "answered" },
            out.peer_ird_ord.0,
            out.peer_ird_ord.1,
            out.peer_dest.qpn
        );
        print!("{}", iwarp::report::to_text(&out.report));
    }
    Ok(true)
}

/// `iwarp serve --config FILE`.
fn run_serve(a: ServeArgs) -> Result<bool, String> {
    let cfg = load_config(&a.config)?;
    let name = a
        .port_name
        .clone()
        .or_else(|| cfg.listeners.iter().find_map(|l| l.port_name.clone()));
    let port = iwarp::deploy::select_port(&cfg, name.as_deref(), None)
        .map_err(|e| format!("{}: {e}", a.config.display()))?;
    let pname = cfg.ports[port].name.clone();
    let paddr = cfg.ports[port].ipv4.addr;
    let listeners: Vec<(u16, control::verbs::ResponderConfig)> = cfg
        .listeners
        .iter()
        .filter(|l| {
            l.port_name.as_deref().is_none_or(|n| n == pname)
                && l.address.is_none_or(|ad| ad == paddr)
        })
        .map(|l| {
            let mpa = match &l.mpa {
                Some(ov) => cfg.mpa.with_overrides(ov),
                None => cfg.mpa.clone(),
            };
            (l.tcp_port, iwarp::deploy::responder_config(&mpa))
        })
        .collect();
    if listeners.is_empty() {
        return Err(format!(
            "{}: no [[listeners]] entry on port {pname:?}",
            a.config.display()
        ));
    }
    let node = iwarp::deploy::open(&cfg, port).map_err(|e| e.to_string())?;
    let count = a.count;
    let memif = cfg.ports[port].driver == appconfig::Driver::Memif;
    let budget = iwarp::bench::server::Budget::from_limits(&cfg.limits);
    let ok = node
        .run(move |dev, mut core| -> Result<bool, String> {
            let mut ls = Vec::new();
            for (tcp_port, rc) in listeners {
                let l = dev
                    .listen(tcp_port, rc)
                    .map_err(|e| format!("listening on {paddr}:{tcp_port}: {e}"))?;
                println!("listening on {paddr}:{tcp_port} ({pname})");
                ls.push(l);
            }
            let on = |b: bool| if b { "on" } else { "off" };
            let o = core.checksum_offload();
            println!(
                "port {pname}: checksum offload tx {}, rx {}; zero-copy tx {}",
                on(o.tx_ipv4_tcp),
                on(o.rx_ipv4_tcp),
                on(core.tx_zero_copy())
            );
            let l = core.limits();
            println!(
                "limits: {} connections, SYN backlog {} per listener (then SYN cookies), \
                 startup {:?} and {} octets, user timeout {:?}, linger {:?}, {} TIME-WAIT, \
                 control queues {}, listener queue {}; sessions: {} at once ({} starting per \
                 client), {} MiB each, {} MiB in all",
                l.max_connections,
                l.syn_backlog,
                l.startup_timeout,
                l.startup_octets,
                l.user_timeout,
                l.linger,
                l.time_wait,
                l.control_queue,
                l.listener_queue,
                budget.sessions,
                budget.pending_per_peer,
                budget.session >> 20,
                budget.total >> 20
            );
            let _ = std::io::stdout().flush();
            let mut server = iwarp::bench::server::Server::new(dev, ls, budget);
            let mut ok = true;
            let mut n = 0u64;
            let mut rejected = 0u64;
            while count.is_none_or(|c| n < c) {
                core.poll();
                server.step();
                while let Some((peer, why)) = server.last_rejections.pop_front() {
                    rejected += 1;
                    println!("rejected {peer}: {why}");
                    let _ = std::io::stdout().flush();
                }
                let Some(s) = server.take_finished() else {
                    continue;
                };
                n += 1;
                match &s.result {
                    Ok(r) => {
                        println!(
                            "session {n} from {}: {}, {} size(s), verified {} octets, {} wrong",
                            s.peer,
                            s.hello.test.name(),
                            s.hello.sizes.len(),
                            r.verified,
                            r.errors
                        );
                        ok &= r.errors == 0;
                    }
                    Err(e) => {
                        println!("session {n} from {} failed: {e}", s.peer);
                        ok = false;
                    }
                }
                let _ = std::io::stdout().flush();
                if memif && server.active() == 0 {
                    // The client exits now: let DPDK's memif tear down unpolled.
                    iwarp::deploy::quiesce_memif(&core, iwarp::deploy::MEMIF_QUIESCE);
                }
            }
            // What the last sessions and any attackers left ends within the limits: wait for
            // the table to empty (keeping the sessions' close handshakes going), then say
            // what the core saw.
            let lim = *core.limits();
            let until = std::time::Instant::now() + lim.startup_timeout + lim.linger * 2;
            while core.connections() > 0 && std::time::Instant::now() < until {
                core.poll();
                server.step();
            }
            let g = core.gauges();
            let st = core.stats();
            let (admitted, refused_sessions) = server.admissions();
            println!(
                "core: {} connections left ({} half-open, {} in TIME-WAIT); {} accepted, \
                 {} SYN cookies sent ({} completed), {} refused, {} startup timeouts, {} \
                 startup overflows, {} linger resets; sessions: {admitted} admitted, \
                 {refused_sessions} rejected ({rejected} printed)",
                g.connections,
                g.half_open,
                g.time_wait,
                st.accepted,
                st.syn_cookies_sent,
                st.syn_cookies_accepted,
                st.refused,
                st.startup_timeouts,
                st.startup_overflows,
                st.linger_resets
            );
            let s = core.port_stats();
            println!(
                "port {pname}: rx {} frames ({} dropped; device checksums {} good, {} bad), \
                 tx {} frames ({} dropped; {} checksum offloaded, {} zero-copy)",
                s.rx_frames,
                s.rx_dropped,
                s.rx_checksum_good,
                s.rx_checksum_bad,
                s.tx_frames,
                s.tx_dropped,
                s.tx_checksum_offloaded,
                s.tx_zero_copy
            );
            Ok(ok)
        })
        .map_err(|e| e.to_string())??;
    Ok(ok)
}

fn read_input(path: &PathBuf) -> std::io::Result<Vec<u8>> {
    if path.as_os_str() == "-" {
        let mut v = Vec::new();
        std::io::stdin().read_to_end(&mut v)?;
        Ok(v)
    } else {
        std::fs::read(path)
    }
}

fn run_decode(args: DecodeArgs) -> Result<bool, String> {
    if let Some(path) = &args.pcap {
        return run_decode_pcap(path, args.json);
    }
    let (path, is_hex) = match (&args.hex, &args.bin) {
        (Some(p), _) => (p, true),
        (None, Some(p)) => (p, false),
        (None, None) => return Err("one of --hex or --bin is required".into()),
    };
    let raw = read_input(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let bytes = if is_hex {
        let text = String::from_utf8(raw)
            .map_err(|_| format!("{}: not text; use --bin for raw octets", path.display()))?;
        decode::parse_hex(&text).map_err(|e| format!("{}: {e}", path.display()))?
    } else {
        raw
    };
    let decoded = decode::decode(
        &bytes,
        decode::DecodeOptions {
            startup: args.startup,
            mode: FpduMode {
                markers: args.markers,
                crc: args.crc,
            },
        },
    );
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for r in &decoded.records {
        let line = if args.json {
            serde_json::Value::Object(r.clone()).to_string()
        } else {
            decode::render_text(r)
        };
        if writeln!(out, "{line}").is_err() {
            // Reader went away (e.g. `| head`): stop quietly.
            return Ok(!decoded.failed);
        }
    }
    let _ = out.flush();
    Ok(!decoded.failed)
}

fn run_rping(a: RpingArgs) -> Result<bool, String> {
    use iwarp::rping::{self, RpingOptions};
    if !(a.timeout > 0.0 && a.timeout.is_finite()) {
        return Err(format!(
            "--timeout must be a positive number of seconds, not {}",
            a.timeout
        ));
    }
    let mut o = RpingOptions {
        count: a.count,
        size: a.size,
        verbose: a.verbose,
        validate: a.validate,
        persistent: a.persistent,
        step_timeout: std::time::Duration::from_secs_f64(a.timeout),
        ..RpingOptions::default()
    };
    o.initiator.crc = !a.no_crc;
    o.responder.crc = !a.no_crc;
    if let Some(n) = a.ird {
        o.initiator.ird = n;
        o.accept.ird = n;
    }
    if let Some(n) = a.ord {
        o.initiator.ord = n;
        o.accept.ord = n;
    }
    o.initiator.enhanced = !a.rev1;
    if let Some(r) = a.p2p {
        o.initiator.peer_to_peer = true;
        o.initiator.rtr_types = control::verbs::RtrTypes::NONE.with(r.into());
    }
    rping::validate_options(&o).map_err(|e| e.to_string())?;
    if let Some(path) = &a.config {
        let cfg = load_config(path)?;
        let client_to = match (a.server, a.addr) {
            (true, _) => None,
            (false, Some(addr)) => Some(std::net::SocketAddrV4::new(addr, a.port)),
            (false, None) => {
                return Err("the rping client needs the server's address (-a ADDR)".into())
            }
        };
        let port = iwarp::deploy::select_port(&cfg, None, a.addr)
            .map_err(|e| format!("{}: {e}", path.display()))?;
        // The file's [mpa] policy is the base; the command line's flags override it.
        let mut init = iwarp::deploy::initiator_config(&cfg.mpa);
        init.crc = init.crc && o.initiator.crc;
        init.enhanced = init.enhanced && o.initiator.enhanced;
        init.ird = o.initiator.ird;
        init.ord = o.initiator.ord;
        if o.initiator.peer_to_peer {
            init.peer_to_peer = true;
            init.rtr_types = o.initiator.rtr_types;
        } else if a.p2p.is_none() {
            init.peer_to_peer = false;
        }
        o.initiator = init;
        let mut resp = iwarp::deploy::responder_config(&cfg.mpa);
        resp.crc = resp.crc && o.responder.crc;
        o.responder = resp;
        let node = iwarp::deploy::open(&cfg, port).map_err(|e| e.to_string())?;
        let tcp_port = a.port;
        let r = node
            .run(move |dev, mut core| {
                let mut out = std::io::stdout();
                match client_to {
                    None => rping::run_server(&dev, &mut core, tcp_port, &o, &mut out),
                    Some(to) => rping::run_client(&dev, &mut core, to, &o, &mut out),
                }
                .map_err(|e| e.to_string())
            })
            .map_err(|e| e.to_string())?;
        let stats = r?;
        if !a.verbose {
            println!(
                "{} pings of {} octets{}",
                stats.pings,
                a.size,
                if a.validate { ", validated" } else { "" }
            );
        }
        match stats.peer_ird_ord {
            Some((i, o)) => println!(
                "negotiated IRD {} ORD {} (peer's MPA frame: IRD {i} ORD {o})",
                stats.ird_ord.0, stats.ird_ord.1
            ),
            None => println!(
                "negotiated IRD {} ORD {} (peer's MPA frame not enhanced)",
                stats.ird_ord.0, stats.ird_ord.1
            ),
        }
        return Ok(true);
    }
    if a.count == 0 {
        return Err("without --config both ends run in this process: give a count (-C N)".into());
    }
    // Both ends in this process: client lines on stdout, server lines on stderr.
    let mut stdout = std::io::stdout();
    let r = rping::run_embedded(&o, a.port, &mut stdout, Box::new(std::io::stderr()));
    match r {
        Ok((c, _)) => {
            if !a.verbose {
                println!(
                    "{} pings of {} octets{}",
                    c.pings,
                    o.size,
                    if a.validate { ", validated" } else { "" }
                );
            }
            Ok(true)
        }
        Err(e) => Err(e.to_string()),
    }
}

fn run_decode_pcap(path: &PathBuf, json: bool) -> Result<bool, String> {
    let raw = read_input(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let decoded = pcap::decode_pcap(&raw).map_err(|e| format!("{}: {e}", path.display()))?;
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    for r in &decoded.records {
        let line = if json {
            serde_json::Value::Object(r.clone()).to_string()
        } else {
            pcap::render_text(r)
        };
        if writeln!(out, "{line}").is_err() {
            return Ok(!decoded.failed);
        }
    }
    let _ = out.flush();
    if decoded.mpa_connections == 0 {
        eprintln!(
            "iwarp: {}: no MPA connection found among {} TCP connections",
            path.display(),
            decoded.connections
        );
    }
    Ok(!decoded.failed)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Decode(args) => run_decode(args),
        Command::Bench(args) => run_bench(args),
        Command::Serve(args) => run_serve(args),
        Command::Rping(args) => run_rping(args),
    };
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("iwarp: {e}");
            ExitCode::from(2)
        }
    }
}
