//! `iwarp rping`: rdma-core's rping, client (`-c`) or server (`-s`), wire-compatible with
//! the real tool; on a DPDK port (`--config`) or both ends in this process.

use std::net::SocketAddrV4;
use std::path::PathBuf;

use clap::Args;
use iwarp::mpa::{self, MpaFlags, MpaPolicy};
use iwarp::rping::{self, RpingOptions, RpingStats};

use super::{load_config, seconds};

/// `iwarp rping`'s arguments (rping's letters, plus the MPA flags every app takes).
#[derive(Args)]
#[command(group(clap::ArgGroup::new("role").args(["server", "client"])))]
pub struct RpingArgs {
    /// Server side.
    #[arg(short = 's')]
    pub server: bool,
    /// Client side.
    #[arg(short = 'c')]
    pub client: bool,
    /// Address: the server's (client), or the one to listen on (server).
    #[arg(short = 'a', value_name = "ADDR")]
    pub addr: Option<std::net::Ipv4Addr>,
    /// TCP port.
    #[arg(short = 'p', default_value_t = rping::DEFAULT_PORT)]
    pub port: u16,
    /// Ping count (0: until interrupted).
    #[arg(short = 'C', default_value_t = 0)]
    pub count: u64,
    /// Ping data size.
    #[arg(short = 'S', default_value_t = rping::DEFAULT_SIZE)]
    pub size: usize,
    /// Display ping data.
    #[arg(short = 'v')]
    pub verbose: bool,
    /// Validate ping data.
    #[arg(short = 'V')]
    pub validate: bool,
    /// Persistent server: serve clients one after the other.
    #[arg(short = 'P')]
    pub persistent: bool,
    /// MPA policy flags, on top of the file's `[mpa]` with --config, else of rping's own
    /// (Rev 2, CRC, client-server, IRD = ORD = 1 as rping asks). A server accepts with
    /// the Request's IRD/ORD unless --ird/--ord say otherwise.
    #[command(flatten)]
    pub mpa: MpaFlags,
    /// Seconds any one step may take.
    #[arg(long, default_value_t = 30.0)]
    pub timeout: f64,
    /// Deployment file selecting the device (DPDK port); without it both ends run in this
    /// process over the in-memory link.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
}

/// rping's options from the arguments and an MPA policy (the flags go on top of it).
fn options(a: &RpingArgs, policy: &MpaPolicy) -> Result<RpingOptions, String> {
    let policy = a.mpa.applied(policy);
    let o = RpingOptions {
        count: a.count,
        size: a.size,
        verbose: a.verbose,
        validate: a.validate,
        persistent: a.persistent,
        step_timeout: seconds("--timeout", a.timeout)?,
        initiator: mpa::initiator(&policy),
        responder: mpa::responder(&policy),
        accept: a.mpa.accept(),
        ..RpingOptions::default()
    };
    rping::validate_options(&o).map_err(|e| e.to_string())?;
    Ok(o)
}

/// Runs `iwarp rping`: true when the pings completed.
pub fn run(a: RpingArgs) -> Result<bool, String> {
    match &a.config {
        Some(path) => on_config(&a, path),
        None => embedded(&a),
    }
}

/// On the file's DPDK port, with its `[mpa]` under the flags.
fn on_config(a: &RpingArgs, path: &std::path::Path) -> Result<bool, String> {
    let cfg = load_config(path)?;
    let o = options(a, &cfg.mpa)?;
    let client_to = match (a.server, a.addr) {
        (true, _) => None,
        (false, Some(addr)) => Some(SocketAddrV4::new(addr, a.port)),
        (false, None) => return Err("the rping client needs the server's address (-a ADDR)".into()),
    };
    let port = iwarp::deploy::select_port(&cfg, None, a.addr)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let node = iwarp::deploy::open(&cfg, port).map_err(|e| e.to_string())?;
    let tcp_port = a.port;
    let stats = node
        .run(move |dev, mut core| {
            let mut out = std::io::stdout();
            match client_to {
                None => rping::run_server(&dev, &mut core, tcp_port, &o, &mut out),
                Some(to) => rping::run_client(&dev, &mut core, to, &o, &mut out),
            }
            .map_err(|e| e.to_string())
        })
        .map_err(|e| e.to_string())??;
    print_pings(a, &stats);
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
    Ok(true)
}

/// Both ends in this process: client lines on stdout, server lines on stderr.
fn embedded(a: &RpingArgs) -> Result<bool, String> {
    let o = options(a, &mpa::rping_default())?;
    if a.count == 0 {
        return Err("without --config both ends run in this process: give a count (-C N)".into());
    }
    let mut stdout = std::io::stdout();
    let (c, _) = rping::run_embedded(&o, a.port, &mut stdout, Box::new(std::io::stderr()))
        .map_err(|e| e.to_string())?;
    print_pings(a, &c);
    Ok(true)
}

fn print_pings(a: &RpingArgs, stats: &RpingStats) {
    if !a.verbose {
        println!(
            "{} pings of {} octets{}",
            stats.pings,
            a.size,
            if a.validate { ", validated" } else { "" }
        );
    }
}
