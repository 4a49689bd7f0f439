//! `iwarp bench`: a perftest-like run, both ends in this process over the in-memory link
//! or, with `--config`, a client on a DPDK port against `iwarp serve` (or perftest with
//! `--perftest`, [`super::perftest`]).

use std::net::SocketAddrV4;
use std::path::PathBuf;

use clap::Args;
use control::embedded::FaultConfig;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use iwarp::bench::{self, BenchOptions, BenchOutcome, Intervals, Length, Test};
use iwarp::mpa::{self, MpaFlags};
use iwarp::report::{IntervalSample, Report, Sample, Thresholds};

use super::{load_config, parse_peer};

/// `iwarp bench`'s arguments.
#[derive(Args)]
pub struct BenchArgs {
    /// Which test.
    #[arg(value_enum)]
    pub test: Test,
    /// Message size in octets [default: 65536, or with --config the file's `[bench] size`].
    #[arg(short = 's', long)]
    pub size: Option<usize>,
    /// Run every size from 2 octets to 8 MiB in powers of two (perftest's -a).
    #[arg(short = 'a', long)]
    pub all_sizes: bool,
    /// Messages (round trips for latency tests) per size [default: 1000, or with --config
    /// the file's `[bench] iters`].
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
    /// The in-memory link emulates a NIC with TCP segmentation offload (checksum offload
    /// with it): consecutive segments of a connection leave as one frame that the link
    /// cuts into the segments the TCP engine planned. With --config, the port's `tso` key
    /// decides.
    #[arg(long, conflicts_with = "config")]
    pub tso: bool,
    /// Seed of the fault decisions (a failing run can be replayed).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Check every octet received.
    #[arg(long)]
    pub verify: bool,
    /// Print the results as JSON.
    #[arg(long)]
    pub json: bool,
    /// Write the latency histogram to FILE in HdrHistogram's percentile format; with
    /// several sizes (-a), one file per size, the size before the extension
    /// (`lat-8.hgrm`).
    #[arg(long, value_name = "FILE")]
    pub hgrm: Option<PathBuf>,
    /// Draw the results into FILE (SVG): the latency percentile distribution of each size
    /// (latency tests), bandwidth and message rate by size (bandwidth tests), or the
    /// bandwidth of each interval (--interval, --run-infinitely).
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// QPs per direction (perftest's -q): each its own connection and session, spread
    /// over the cores; the figures are per QP and in aggregate. Bandwidth tests only.
    #[arg(short = 'q', long = "qp", value_name = "N", default_value_t = 1)]
    pub qps: usize,
    /// Both directions at once (perftest's -b): each node runs -q clients against the
    /// other's server. Bandwidth tests, both ends in this process.
    #[arg(short = 'b', long)]
    pub bidirectional: bool,
    /// Poll-mode cores per node of the embedded default, each on a thread of its own
    /// (the QPs' consumer work runs on threads of their own, not on the cores). With
    /// --config, the file's [[lcores]] and queues decide.
    #[arg(long, value_name = "N", default_value_t = 1, conflicts_with = "config")]
    pub cores: usize,
    /// Work requests posted per doorbell by the bandwidth tests (perftest's post list).
    #[arg(short = 'l', long, value_name = "N", default_value_t = 1)]
    pub post_list: usize,
    /// Bandwidth tests: signal only every N-th work request; its completion covers the
    /// ones before it (perftest's -Q/--cq-mod). At most the tx depth; a read-bw run takes
    /// at most its ORD. 1 signals every request. Default as perftest's: the post list with
    /// -l, else 100 (at most the tx depth), but 1 for one size above 8192 octets.
    #[arg(short = 'Q', long = "cq-mod", value_name = "N")]
    pub cq_mod: Option<usize>,
    /// Bandwidth in Gb/sec (10^9 bits) instead of MiB/sec (perftest's --report_gbits).
    #[arg(long, alias = "report_gbits")]
    pub report_gbits: bool,
    /// Print only this figure, one line per size (perftest's --output): the average
    /// bandwidth, the message rate (Mpps), or the average latency (usec).
    #[arg(long, value_enum, value_name = "FIGURE", conflicts_with = "json")]
    pub output: Option<Figure>,
    /// Bandwidth tests: print the bandwidth of each interval of this many seconds, and
    /// the lowest of them at the end.
    #[arg(long, value_name = "SECONDS")]
    pub interval: Option<f64>,
    /// Bandwidth tests: run until interrupted (Ctrl-C), printing the bandwidth of every
    /// interval (--interval, else -D, else 5 s); Ctrl-C ends the run cleanly with the
    /// summary (perftest's --run_infinitely).
    #[arg(long, alias = "run_infinitely", conflicts_with_all = ["iters", "all_sizes"])]
    pub run_infinitely: bool,
    /// Fail (exit status 1) when a size's average bandwidth is below this, MiB/sec (Gb/sec
    /// with --report-gbits).
    #[arg(long, value_name = "BW")]
    pub min_bw: Option<f64>,
    /// Fail (exit status 1) when a size's 99th percentile latency is above this, usec.
    #[arg(long, value_name = "USEC")]
    pub max_lat_p99: Option<f64>,
    /// Accepted for perftest's command lines: perftest's -F stops it failing when CPU
    /// frequency scaling makes its cycle counter unreliable; iwarp times with the
    /// monotonic clock, so there is nothing to check.
    #[arg(short = 'F', long = "cpu-freq")]
    pub cpu_freq: bool,
    /// perftest's -I (inline size): refused with a reason (see the run's error).
    #[arg(short = 'I', long = "inline-size", value_name = "N")]
    pub inline_size: Option<usize>,
    /// Speak perftest's `-R` (rdma_cm) exchange instead of our own: a client against
    /// `ib_{write,read,send}_{bw,lat} -R` (with --config and --peer), or with --server
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

/// A single figure for --output.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Figure {
    /// Average bandwidth.
    Bandwidth,
    /// Message rate.
    #[value(alias = "message_rate")]
    MessageRate,
    /// Average latency.
    Latency,
}

/// The checks every run takes, --perftest or not: flags that cannot apply are refused
/// with the reason.
fn check_flags(a: &BenchArgs) -> Result<(), String> {
    if a.inline_size.is_some_and(|n| n > 0) {
        return Err(
            "-I (inline sends) is refused: inline data is an RNIC's copy of a Send's \
                    payload into the work request at post time; this RNIC reads a payload from \
                    its memory region when it frames it, so the buffer is not free at post \
                    time as -I promises"
                .into(),
        );
    }
    match (a.output, a.test.is_latency()) {
        (Some(Figure::Latency), false) | (Some(Figure::Bandwidth | Figure::MessageRate), true) => {
            return Err(format!(
                "--output {:?} is not a figure of {}",
                a.output.unwrap_or(Figure::Bandwidth),
                a.test.name()
            )
            .to_lowercase())
        }
        _ => {}
    }
    if a.min_bw.is_some() && a.test.is_latency() {
        return Err("--min-bw is for the bandwidth tests".into());
    }
    if a.max_lat_p99.is_some() && !a.test.is_latency() {
        return Err("--max-lat-p99 is for the latency tests".into());
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
    Ok(())
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
    if a.hgrm.is_some() && !test.is_latency() {
        return Err("--hgrm writes latency histograms: it needs a latency test".into());
    }
    if !(576..=9000).contains(&a.mtu) {
        return Err(format!("--mtu must be within 576..=9000, not {}", a.mtu));
    }
    let intervals = if a.interval.is_some() || a.run_infinitely {
        let every = a
            .interval
            .or(if a.run_infinitely { a.duration } else { None });
        let every = super::seconds("--interval", every.unwrap_or(5.0))?;
        let gbits = a.report_gbits;
        let json = a.json;
        Some(Intervals {
            every,
            report: Arc::new(move |s: &IntervalSample| {
                // Interval lines go to stderr under --json, so stdout stays one JSON
                // document.
                let line = interval_line(s, gbits);
                if json {
                    eprintln!("{line}");
                } else {
                    println!("{line}");
                }
            }),
            stop: a.run_infinitely.then(interrupt_flag).transpose()?,
        })
    } else {
        None
    };
    // A run until stopped tells the server it runs for a time, not a count.
    let length = match &intervals {
        Some(Intervals {
            every,
            stop: Some(_),
            ..
        }) => Length::Duration(*every),
        _ => length,
    };
    Ok(BenchOptions {
        test,
        sizes: if a.all_sizes {
            bench::all_sizes()
        } else {
            vec![a.size()]
        },
        length,
        tx_depth: a.tx_depth,
        mtu: a.mtu,
        mpa: a.mpa.applied(&mpa::bench_default()),
        faults: faults(a),
        tso: a.tso,
        verify: a.verify,
        // On stderr, and only when it is a terminal: never in stdout's JSON or figures.
        progress: true,
        post_list: a.post_list,
        cq_mod: cq_mod(a),
        intervals,
        qps: a.qps,
        cores: a.cores,
        bidirectional: a.bidirectional,
        core: None,
    })
}

/// perftest's default completion moderation (`DEF_CQ_MOD`) when -Q is not given.
pub const DEFAULT_CQ_MOD: usize = 100;

/// Above this message size perftest signals every request unless -Q is given
/// (`MSG_SIZE_CQ_MOD_LIMIT`): a completion per large message costs little, and a group of
/// them would make the run's figures coarse.
pub const CQ_MOD_SIZE_LIMIT: usize = 8192;

/// The completion moderation of a run: -Q as given, else perftest's rule. A latency test
/// waits for each message (1); with a post list (-l N), every N-th request (its last
/// when the lists line up with the tx depth and the credits);
/// a bandwidth test of one size above [`CQ_MOD_SIZE_LIMIT`] signals every request (1);
/// any other signals every [`DEFAULT_CQ_MOD`]-th, at most its tx depth. A sweep (-a)
/// keeps the one figure for every size, as perftest's does.
fn cq_mod(a: &BenchArgs) -> usize {
    match a.cq_mod {
        Some(q) => q,
        None if a.test.is_latency() => 1,
        None if a.post_list > 1 => a.post_list,
        None if !a.all_sizes && a.size() > CQ_MOD_SIZE_LIMIT => 1,
        None => DEFAULT_CQ_MOD.min(a.tx_depth.max(1)),
    }
}

/// The fault flags.
pub fn faults(a: &BenchArgs) -> FaultConfig {
    FaultConfig {
        loss: a.loss,
        reorder: a.reorder,
        duplicate: a.duplicate,
        resegment: a.resegment,
        corrupt: a.corrupt,
        seed: a.seed,
        ..FaultConfig::default()
    }
}

/// One interval's line: when it ended, the messages, the bandwidth and the rate.
fn interval_line(s: &IntervalSample, gbits: bool) -> String {
    let (bw, unit) = if gbits {
        (iwarp::report::gbits(s.avg_mib_s), "Gb/sec")
    } else {
        (s.avg_mib_s, "MiB/sec")
    };
    format!(
        " interval to {:.1} s: {} messages of {} octets, {bw:.2} {unit}, {:.6} Mpps",
        s.end_s, s.iterations, s.bytes, s.msg_rate_mpps
    )
}

/// A flag Ctrl-C raises (once set up; a second Ctrl-C still ends the process at once).
fn interrupt_flag() -> Result<Arc<AtomicBool>, String> {
    let flag = Arc::new(AtomicBool::new(false));
    let f = flag.clone();
    ctrlc::set_handler(move || {
        if f.swap(true, Ordering::Relaxed) {
            std::process::exit(130);
        }
    })
    .map_err(|e| format!("--run-infinitely: cannot catch Ctrl-C: {e}"))?;
    Ok(flag)
}

impl BenchArgs {
    /// The message size: `-s`, else 65536.
    pub fn size(&self) -> usize {
        self.size.unwrap_or(DEFAULT_SIZE)
    }

    /// The deployment's `[bench]` defaults under the flags: `size` without `-s`, `iters`
    /// without `-n`, `-D` or `--run-infinitely`.
    pub fn with_file_defaults(mut self, cfg: &appconfig::Config) -> BenchArgs {
        if let Some(b) = &cfg.bench {
            self.size = self.size.or(Some(b.size as usize));
            if self.duration.is_none() && !self.run_infinitely {
                self.iters = self.iters.or(Some(b.iters));
            }
        }
        self
    }
}

/// `-s` when it is not given (and no deployment file says).
pub const DEFAULT_SIZE: usize = 65536;

/// Runs `iwarp bench`: true when every octet was verified (or nothing was to be).
pub fn run(a: BenchArgs) -> Result<bool, String> {
    let a = match &a.config {
        Some(path) => {
            let cfg = load_config(path)?;
            a.with_file_defaults(&cfg)
        }
        None => a,
    };
    check_flags(&a)?;
    if a.perftest {
        return super::perftest::run(&a);
    }
    let opts = options(&a)?;
    let mut out = match &a.config {
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
    let passed = finish_report(&a, &mut out.report);
    print(&a, &out)?;
    Ok(out.verify_errors == 0 && out.verified_octets == out.expected_octets && passed)
}

/// Puts the display flags and the thresholds' verdict into `r`; false when a threshold
/// was missed.
pub fn finish_report(a: &BenchArgs, r: &mut Report) -> bool {
    r.params.report_gbits = a.report_gbits;
    if a.min_bw.is_some() || a.max_lat_p99.is_some() {
        let t = Thresholds {
            // Given in the unit the report shows.
            min_bw_mib_s: a.min_bw.map(|b| {
                if a.report_gbits {
                    b * 1e9 / 8.0 / iwarp::report::MIB
                } else {
                    b
                }
            }),
            max_lat_p99_us: a.max_lat_p99,
            ..Thresholds::default()
        };
        r.thresholds = Some(t.check(&r.samples));
    }
    r.thresholds.as_ref().is_none_or(|t| t.passed)
}

fn print(a: &BenchArgs, out: &BenchOutcome) -> Result<(), String> {
    print_report(a, &out.report);
    if let Some(path) = &a.plot {
        plot(path, &out.report, &out.histograms)?;
    }
    if let Some(path) = &a.hgrm {
        write_hgrms(path, &out.histograms)?;
    }
    Ok(())
}

/// Writes each size's latency histogram (nanoseconds) in HdrHistogram's percentile
/// format, to `path` or, for several sizes, one file per size (see `--hgrm`).
pub fn write_hgrms(
    path: &std::path::Path,
    histograms: &[(usize, hdrhistogram::Histogram<u64>)],
) -> Result<(), String> {
    for (p, h) in hgrm_paths(path, histograms) {
        let mut f = std::fs::File::create(&p).map_err(|e| format!("{}: {e}", p.display()))?;
        iwarp::report::write_hgrm(h, &mut f, 1000.0)
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

/// The report as the flags ask: one figure per size (--output), JSON, or text.
pub fn print_report(a: &BenchArgs, report: &Report) {
    if let Some(figure) = a.output {
        for s in &report.samples {
            let v = match (figure, s) {
                (Figure::Bandwidth, Sample::Bw(b)) if a.report_gbits => {
                    iwarp::report::gbits(b.avg_mib_s)
                }
                (Figure::Bandwidth, Sample::Bw(b)) => b.avg_mib_s,
                (Figure::MessageRate, Sample::Bw(b)) => b.msg_rate_mpps,
                (Figure::Latency, Sample::Lat(l)) => l.t_avg,
                _ => continue,
            };
            if figure == Figure::MessageRate {
                println!("{v:.6}");
            } else {
                println!("{v:.2}");
            }
        }
        if let Some(t) = &report.thresholds {
            for f in &t.failures {
                eprintln!("iwarp: threshold missed: {f}");
            }
        }
    } else if a.json {
        print!("{}", iwarp::report::to_json(report));
    } else {
        print!("{}", iwarp::report::to_text(report));
    }
}

/// The chart of a run (see `--plot`): `histograms` are its latency sizes'.
pub fn plot(
    path: &std::path::Path,
    r: &Report,
    histograms: &[(usize, hdrhistogram::Histogram<u64>)],
) -> Result<(), String> {
    let title = format!("{} ({}, {})", r.test, r.params.mpa, r.params.link);
    let at = |e: String| format!("{}: {e}", path.display());
    if !histograms.is_empty() {
        // A sweep draws at most eight of its sizes, spread over it.
        let series: Vec<(String, &hdrhistogram::Histogram<u64>)> =
            iwarp::plot::spread(&histograms.iter().collect::<Vec<_>>(), 8)
                .into_iter()
                .map(|(size, h)| (format!("{size} octets"), h))
                .collect();
        return iwarp::plot::latency_percentiles(path, &format!("{title} latency"), &series)
            .map_err(at);
    }
    if !r.intervals.is_empty() {
        let pts = r.intervals.iter().map(|i| (i.end_s, i.avg_mib_s)).collect();
        return iwarp::plot::over_time(
            path,
            &format!("{title} bandwidth per interval"),
            "bandwidth [MiB/sec]",
            &[(format!("{} octets", r.params.size), pts)],
        )
        .map_err(at);
    }
    let (bw, rate) = bw_points(r);
    iwarp::plot::by_size(
        path,
        &[
            iwarp::plot::Panel {
                title: &format!("{title} bandwidth"),
                y_desc: "average bandwidth [MiB/sec]",
                series: &[("this run".into(), bw)],
            },
            iwarp::plot::Panel {
                title: "message rate",
                y_desc: "message rate [Mpps]",
                series: &[("this run".into(), rate)],
            },
        ],
    )
    .map_err(at)
}

/// Average bandwidth and message rate by size, of a bandwidth report.
pub fn bw_points(r: &Report) -> (iwarp::plot::BySize, iwarp::plot::BySize) {
    r.samples
        .iter()
        .filter_map(|s| match s {
            Sample::Bw(b) => Some(((b.bytes, b.avg_mib_s), (b.bytes, b.msg_rate_mpps))),
            Sample::Lat(_) => None,
        })
        .unzip()
}

/// Where each size's histogram goes: `path` itself for one size, else `path` with the
/// size before its extension (`lat.hgrm` → `lat-8.hgrm`, `lat-16.hgrm`, ...).
fn hgrm_paths<'a, T>(path: &std::path::Path, hists: &'a [(usize, T)]) -> Vec<(PathBuf, &'a T)> {
    if hists.len() == 1 {
        return vec![(path.to_path_buf(), &hists[0].1)];
    }
    let stem = path
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    hists
        .iter()
        .map(|(size, h)| (path.with_file_name(format!("{stem}-{size}{ext}")), h))
        .collect()
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
    if opts.bidirectional {
        return Err(
            "-b needs clients on both nodes: with --config the other end is iwarp serve, \
             which runs none (run both ends in this process without --config)"
                .into(),
        );
    }
    if node.cores.len() > 1 {
        // Every core polls on its lcore; each QP's client runs on a thread of its own,
        // QP q from core q % cores.
        opts.cores = node.cores.len();
        let o = opts.clone();
        let (r, cores) = node
            .run_cores(move |dev, _| bench::run_clients(&dev, &o, peer))
            .map_err(|e| e.to_string())?;
        let runs = r.map_err(|e| e.to_string())?;
        let mut al = control::verbs::AlignmentStats::default();
        for c in &cores {
            al.merge(&c.alignment());
        }
        return Ok(bench::report_clients(&opts, runs, al, link));
    }
    let o = opts.clone();
    if opts.qps > 1 {
        // Each QP's client on a thread of its own; the lcore only polls.
        let (_core, r) = node
            .run(move |dev, core| bench::run_clients_driving(&dev, core, &o, peer, link))
            .map_err(|e| e.to_string())?;
        return r.map_err(|e| e.to_string());
    }
    let init = mpa::initiator(&opts.mpa);
    let (core, r) = node
        .run(move |dev, core| bench::run_client(&dev, core, &o, peer, init))
        .map_err(|e| e.to_string())?;
    let client = r.map_err(|e| e.to_string())?;
    Ok(bench::outcome(&opts, client, vec![core.alignment()], link))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: BenchArgs,
    }

    /// One af_packet port and its lcore, then `rest`.
    fn deployment(rest: &str) -> Result<appconfig::Config, appconfig::ConfigError> {
        let text = format!(
            "[[ports]]\nname = \"p0\"\ndriver = \"af_packet\"\niface = \"veth0\"\n\
             ipv4 = \"10.9.0.1/24\"\n\n[[lcores]]\nid = 1\nports = [\"p0\"]\n\n{rest}"
        );
        appconfig::from_str(&text, "t.toml")
    }

    fn args(line: &[&str]) -> BenchArgs {
        let mut v = vec!["bench"];
        v.extend_from_slice(line);
        Cli::try_parse_from(v).unwrap().a
    }

    /// `[bench] size` and `iters` are the defaults under `-s`, `-n` and `-D`.
    #[test]
    fn bench_section_gives_size_and_iters() {
        let cfg =
            deployment("[bench]\npeer = \"10.9.0.2:18515\"\nsize = 4096\niters = 77\n").unwrap();
        let a = args(&["write-bw"]).with_file_defaults(&cfg);
        assert_eq!((a.size(), a.iters), (4096, Some(77)));
        let a = args(&["write-bw", "-s", "8", "-n", "5"]).with_file_defaults(&cfg);
        assert_eq!((a.size(), a.iters), (8, Some(5)));
        // A run for a time takes no count from the file.
        let a = args(&["write-bw", "-D", "2"]).with_file_defaults(&cfg);
        assert_eq!((a.size(), a.iters), (4096, None));
        // Without a [bench] section: the built-in defaults.
        let bare = deployment("").unwrap();
        let a = args(&["write-bw"]).with_file_defaults(&bare);
        assert_eq!((a.size(), a.iters), (DEFAULT_SIZE, None));
    }

    /// `[bench] test` is gone: a file that still has it is refused at the key.
    #[test]
    fn bench_test_key_is_refused() {
        let e = deployment("[bench]\npeer = \"10.9.0.2:18515\"\ntest = \"write\"\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("bench.test") && e.contains("unknown field `test`"),
            "{e}"
        );
    }
}
