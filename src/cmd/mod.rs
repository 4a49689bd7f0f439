//! The subcommands of the `iwarp` binary, one module each: its arguments, how they become
//! the library's options, and what it prints.

pub mod bench;
pub mod decode;
pub mod perftest;
pub mod report;
pub mod rping;
pub mod serve;

use std::net::{Ipv4Addr, SocketAddrV4};
use std::path::Path;
use std::time::Duration;

/// The deployment file at `path`, validated, and (in a build that can run it, with DPDK)
/// checked against this machine before anything starts: each problem at its field.
pub fn load_config(path: &Path) -> Result<appconfig::Config, String> {
    if cfg!(feature = "dpdk") {
        appconfig::load_on(path, &appconfig::System)
    } else {
        appconfig::load(path)
    }
    .map_err(|e| e.to_string())
}

/// `ADDR` or `ADDR:PORT` (`default_port` when left out).
pub fn parse_peer(p: &str, default_port: u16) -> Result<SocketAddrV4, String> {
    match p.parse::<SocketAddrV4>() {
        Ok(s) => Ok(s),
        Err(_) => p
            .parse::<Ipv4Addr>()
            .map(|a| SocketAddrV4::new(a, default_port))
            .map_err(|_| format!("--peer {p:?} is not ADDR or ADDR:PORT")),
    }
}

/// A `--timeout` in seconds, which must be positive and finite.
pub fn seconds(name: &str, s: f64) -> Result<Duration, String> {
    if s > 0.0 && s.is_finite() {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(format!(
            "{name} must be a positive number of seconds, not {s}"
        ))
    }
}
