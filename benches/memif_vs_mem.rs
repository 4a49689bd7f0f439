//! RDMA Write bandwidth and 8-byte write latency between two `iwarp` processes joined by
//! DPDK's `net_memif` (shared memory), reported against the in-memory link measured in
//! the same run (both ends in one process, `iwarp::bench::run_embedded`). Target: memif
//! bandwidth at least half the in-memory link's.
//!
//! `cargo bench --features dpdk --bench memif_vs_mem`; `BENCH_QUICK=1` shrinks it to a smoke run. The two
//! processes are `iwarp serve --config` (memif server role) and `iwarp bench --config
//! --peer` (memif client role), with their dataplane lcores on different CPUs, the same
//! MTU (1500) and MPA mode (Rev 2, CRC on) as the in-memory run. Needs no NIC and no
//! hugepages; the memif socket lives in a temporary directory.
//!
//! Bandwidth over memif is measured twice: with `tx_zero_copy = true` (payloads attached
//! to the mbufs from the send queue) and with the default copy into the mbufs, reported
//! as a ratio. The memif-against-in-memory figures use the default.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use iwarp::bench::{run_embedded, BenchOptions, Length, Test};
use iwarp::report::Sample;

/// The iwarp binary (cargo builds it for the package's benches).
fn iwarp_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_iwarp"))
}

fn config(
    dir: &Path,
    role: &str,
    last: u8,
    dataplane: u32,
    control: u32,
    zero_copy: bool,
) -> PathBuf {
    let sock = dir.join("memif.sock");
    let text = format!(
        "[[ports]]\nname = \"m0\"\ndriver = \"memif\"\nrole = \"{role}\"\nsocket = \"{}\"\nid = 0\n\
         mac = \"02:00:00:4d:00:0{last}\"\nipv4 = \"10.79.0.{last}/24\"\ntx_zero_copy = {zero_copy}\n\n\
         [[lcores]]\nid = {dataplane}\nports = [\"m0\"]\n\n[control]\nlcore = {control}\n\n\
         [[listeners]]\ntcp_port = 18515\nport_name = \"m0\"\n\n\
         [tcp]\nrto_min = \"5ms\"\nrto_initial = \"200ms\"\nrecv_buffer = 4194304\nsend_buffer = 4194304\n",
        sock.display()
    );
    let p = dir.join(format!("{role}.toml"));
    std::fs::write(&p, text).expect("config");
    p
}

/// Runs one client test against a fresh memif server, both with or without zero-copy
/// transmit; returns the client's JSON sample.
fn memif_run(
    bin: &Path,
    dir: &Path,
    test: &str,
    args: &[&str],
    zero_copy: bool,
) -> Result<serde_json::Value, String> {
    let server_cfg = config(dir, "server", 2, 1, 0, zero_copy);
    let client_cfg = config(dir, "client", 1, 0, 1, zero_copy);
    let mut server = Command::new(bin)
        .args(["serve", "--config"])
        .arg(&server_cfg)
        .args(["--count", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("spawning the server: {e}"))?;
    // The server creates the socket; the client's memif retries its connection.
    std::thread::sleep(Duration::from_millis(1500));
    let out = Command::new(bin)
        .args(["bench", test, "--config"])
        .arg(&client_cfg)
        .args(["--peer", "10.79.0.2", "--json"])
        .args(args)
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("running the client: {e}"));
    let _ = server.kill();
    let _ = server.wait();
    let out = out?;
    if !out.status.success() {
        return Err(format!(
            "client failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let json: serde_json::Value =
        serde_json::from_str(&text).map_err(|e| format!("client output: {e}: {text}"))?;
    Ok(json["samples"][0].clone())
}

fn main() {
    let quick = common::quick();
    let bw_iters: u64 = if quick { 500 } else { 20_000 };
    let lat_iters: u64 = if quick { 1000 } else { 50_000 };
    let bin = iwarp_bin();
    if !bin.exists() {
        eprintln!(
            "{} is missing: run `cargo build --release` first (cargo bench builds it too)",
            bin.display()
        );
        std::process::exit(1);
    }
    let dir = std::env::temp_dir().join(format!("iwarp-memif-bench-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);

    // The in-memory reference, same sizes and mode.
    let mem_bw = run_embedded(&BenchOptions {
        test: Test::WriteBw,
        sizes: vec![65536],
        length: Length::Iterations(bw_iters),
        ..BenchOptions::default()
    })
    .map(|o| match &o.report.samples[0] {
        Sample::Bw(b) => b.avg_mib_s,
        Sample::Lat(_) => f64::NAN,
    });
    let mem_lat = run_embedded(&BenchOptions {
        test: Test::WriteLat,
        sizes: vec![8],
        length: Length::Iterations(lat_iters),
        ..BenchOptions::default()
    })
    .map(|o| match &o.report.samples[0] {
        Sample::Lat(l) => (l.t_typical, l.p99, l.p999),
        Sample::Bw(_) => (f64::NAN, f64::NAN, f64::NAN),
    });
    let n_bw = bw_iters.to_string();
    let n_lat = lat_iters.to_string();
    let bw = |zero_copy| {
        memif_run(
            &bin,
            &dir,
            "write-bw",
            &["-s", "65536", "-n", &n_bw],
            zero_copy,
        )
        .map(|s| s["avg_mib_s"].as_f64().unwrap_or(f64::NAN))
    };
    let memif_bw_zero_copy = bw(true);
    let memif_bw = bw(false);
    let memif_lat =
        memif_run(&bin, &dir, "write-lat", &["-s", "8", "-n", &n_lat], false).map(|s| {
            (
                s["t_typical"].as_f64().unwrap_or(f64::NAN),
                s["p99"].as_f64().unwrap_or(f64::NAN),
                s["p999"].as_f64().unwrap_or(f64::NAN),
            )
        });
    let _ = std::fs::remove_dir_all(&dir);

    println!("figure                          memif           in-memory       ratio   target");
    match (&memif_bw, &mem_bw) {
        (Ok(m), Ok(r)) => {
            let ratio = m / r;
            println!(
                "write-bw 64KiB MiB/s            {m:<15.1} {r:<15.1} {ratio:<7.2} >= 0.5: {}",
                if ratio >= 0.5 { "met" } else { "NOT met" }
            );
        }
        (m, r) => println!("write-bw 64KiB: memif {m:?}, in-memory {r:?}"),
    }
    println!();
    println!("figure                          zero-copy       copy            ratio");
    match (&memif_bw_zero_copy, &memif_bw) {
        (Ok(z), Ok(c)) => println!(
            "memif write-bw 64KiB MiB/s      {z:<15.1} {c:<15.1} {:<7.2}",
            z / c
        ),
        (z, c) => println!("memif write-bw 64KiB: zero-copy {z:?}, copy {c:?}"),
    }
    println!();
    match (&memif_lat, &mem_lat) {
        (Ok(m), Ok(r)) => {
            println!(
                "write-lat 8B typical us         {:<15.2} {:<15.2} {:<7.2}",
                m.0,
                r.0,
                m.0 / r.0
            );
            println!(
                "write-lat 8B p99 us             {:<15.2} {:<15.2}",
                m.1, r.1
            );
            println!(
                "write-lat 8B p99.9 us           {:<15.2} {:<15.2}",
                m.2, r.2
            );
        }
        (m, r) => println!("write-lat 8B: memif {m:?}, in-memory {r:?}"),
    }
    if memif_bw.is_err()
        || memif_bw_zero_copy.is_err()
        || memif_lat.is_err()
        || mem_bw.is_err()
        || mem_lat.is_err()
    {
        std::process::exit(1);
    }
}
