//! `iwarp`: the iWARP appliance command line. This file parses and dispatches; each
//! subcommand is a module of [`cmd`].
//!
//! * `iwarp bench`: perftest-like RDMA Write/Read/Send bandwidth and latency runs; without
//!   a config file both ends run in this process over the in-memory link.
//! * `iwarp serve`: serves `iwarp bench` clients on a DPDK port.
//! * `iwarp decode`: decode one half connection of an iWARP byte stream (MPA startup
//!   frame, FPDUs with CRC and marker checks, DDP/RDMAP headers), or every iWARP connection
//!   of a pcap capture (`--pcap`).
//! * `iwarp rping`: rdma-core's rping, client or server (see [`iwarp::rping`]).
//! * `iwarp report compare A.json B.json`: two bench reports side by side, with ratios.
#![forbid(unsafe_code)]

mod cmd;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

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
    Bench(Box<cmd::bench::BenchArgs>),
    /// Serve `iwarp bench` clients on a DPDK port described by a deployment file.
    Serve(cmd::serve::ServeArgs),
    /// Decode one half connection's byte stream: MPA startup frame, FPDUs, DDP/RDMAP.
    Decode(cmd::decode::DecodeArgs),
    /// rdma-core's rping (client -c or server -s), wire-compatible with the real tool.
    Rping(cmd::rping::RpingArgs),
    /// Work with reports of `iwarp bench --json`: compare two runs (and draw them).
    Report(cmd::report::ReportArgs),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Decode(a) => cmd::decode::run(a),
        Command::Bench(a) => cmd::bench::run(*a),
        Command::Serve(a) => cmd::serve::run(a),
        Command::Rping(a) => cmd::rping::run(a),
        Command::Report(a) => cmd::report::run(a),
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
