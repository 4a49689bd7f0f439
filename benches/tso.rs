//! Transmit segmentation offload: the bandwidth of a node that hands its device frames of
//! several segments against the same node sending one frame per segment, measured in the
//! same run, alternately.
//!
//! 1. The in-memory link (`iwarp::bench::run_embedded`, `--tso`): the wire cuts the frames
//!    as a device would (`dataplane::port::tso`). RDMA Write (the client transmits) and
//!    RDMA Read (the server's Read Responses) of 64 KiB.
//! 2. With `--features dpdk`, as root: a `net_tap` server (`iwarp serve`, `tso = true`
//!    against the default copy into one mbuf per segment) bridged to an `af_packet` client
//!    in a network namespace the bench makes and removes; read-bw, so that the server's
//!    Read Responses are what the tap segments (DPDK's GSO library, in software). MTU 1400
//!    (`dpdk_port::TAP_TSO_MAX_MTU`).
//!
//! `cargo bench --bench tso` (`--features dpdk` for part 2); `BENCH_QUICK=1` shrinks it to
//! a smoke run. Figures are medians of alternating runs; the ratio is TSO over no TSO.

mod common;
use common::{median, quick};

#[cfg(feature = "dpdk")]
#[path = "../tests/common/procs.rs"]
mod procs;

use iwarp::bench::{run_embedded, BenchOptions, Length, Test};
use iwarp::report::Sample;
use std::time::Duration;

fn mib_s(o: &BenchOptions) -> f64 {
    let r = run_embedded(o).unwrap_or_else(|e| panic!("{e}"));
    match &r.report.samples[0] {
        Sample::Bw(b) => b.avg_mib_s,
        other => panic!("not a bandwidth sample: {other:?}"),
    }
}

fn in_memory() {
    let rounds = if quick() { 1 } else { 5 };
    let secs = if quick() { 0.3 } else { 2.0 };
    println!("in-memory link, MTU 1500, 64 KiB messages, {rounds} alternating runs of {secs} s");
    for test in [Test::WriteBw, Test::ReadBw] {
        let (mut with, mut without) = (Vec::new(), Vec::new());
        for _ in 0..rounds {
            for tso in [true, false] {
                let o = BenchOptions {
                    test,
                    sizes: vec![65536],
                    length: Length::Duration(Duration::from_secs_f64(secs)),
                    tso,
                    ..BenchOptions::default()
                };
                let bw = mib_s(&o);
                if tso { &mut with } else { &mut without }.push(bw);
            }
        }
        let (w, wo) = (median(with), median(without));
        println!(
            "  {:<9} TSO {w:8.0} MiB/s, one frame per segment {wo:8.0} MiB/s: {:.2}x",
            test.name(),
            w / wo
        );
    }
}

#[cfg(feature = "dpdk")]
fn tap() {
    use procs::{running_as_root, Netns, Proc, TempDir};
    if !running_as_root() || std::process::Command::new("ip").arg("-V").output().is_err() {
        println!("net_tap: skipped (needs root and iproute2)");
        return;
    }
    let ns = Netns::new("bench-tso");
    ns.bridge_with_veths("iwbrT", &[("iwCT", "iwDT")]);
    let dir = TempDir::new("bench-tso");
    let tcp = "[tcp]\nrto_min = \"5ms\"\nrto_initial = \"200ms\"\n";
    let client = dir.0.join("client.toml");
    std::fs::write(
        &client,
        format!(
            "[[ports]]\nname = \"p0\"\ndriver = \"af_packet\"\niface = \"iwCT\"\nframecnt = 4096\n\
             mac = \"02:00:00:dd:00:01\"\nipv4 = \"10.97.0.1/24\"\nmtu = 1400\n\n\
             [[lcores]]\nid = 0\nports = [\"p0\"]\n\n[control]\nlcore = 1\n{tcp}"
        ),
    )
    .expect("client config");
    let rounds = if quick() { 1 } else { 3 };
    let secs = if quick() { "1" } else { "3" };
    let (mut with, mut without) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        for tso in [true, false] {
            let server = dir.0.join("server.toml");
            std::fs::write(
                &server,
                format!(
                    "[[ports]]\nname = \"p0\"\ndriver = \"tap\"\niface = \"iwtapT\"\n\
                     mac = \"02:00:00:dd:00:02\"\nipv4 = \"10.97.0.2/24\"\nmtu = 1400\ntso = {tso}\n\n\
                     [[lcores]]\nid = 1\nports = [\"p0\"]\n\n[control]\nlcore = 0\n\n\
                     [[listeners]]\ntcp_port = 18515\nport_name = \"p0\"\n\n{tcp}"
                ),
            )
            .expect("server config");
            let server = server.to_string_lossy().into_owned();
            let mut srv = Proc::spawn(Some(&ns), &["serve", "--config", &server, "--count", "1"]);
            srv.expect_line("listening on", Duration::from_secs(20));
            ns.quiet("iwtapT");
            ns.ip(&["link", "set", "iwtapT", "master", "iwbrT"]);
            ns.ip(&["link", "set", "iwtapT", "up"]);
            let client = client.to_string_lossy().into_owned();
            let (ok, out) = Proc::spawn(
                Some(&ns),
                &[
                    "bench",
                    "read-bw",
                    "--config",
                    &client,
                    "--peer",
                    "10.97.0.2",
                    "-s",
                    "65536",
                    "-D",
                    secs,
                    "--json",
                ],
            )
            .finish(Duration::from_secs(60));
            let (_, srv_out) = srv.finish(Duration::from_secs(10));
            assert!(ok, "client failed:\n{out}\n--- server:\n{srv_out}");
            let from = out.find("\n{").map_or(0, |i| i + 1);
            let to = out.rfind('}').map_or(out.len(), |i| i + 1);
            let json: serde_json::Value =
                serde_json::from_str(&out[from..to]).unwrap_or_else(|e| panic!("{e}:\n{out}"));
            let bw = json["samples"][0]["avg_mib_s"].as_f64().expect("avg_mib_s");
            if tso { &mut with } else { &mut without }.push(bw);
        }
    }
    let (w, wo) = (median(with), median(without));
    println!(
        "net_tap server -> af_packet client, read-bw 64 KiB, MTU 1400, {rounds} alternating runs of {secs} s\n  \
         TSO {w:8.0} MiB/s, one mbuf per segment {wo:8.0} MiB/s: {:.2}x",
        w / wo
    );
}

fn main() {
    in_memory();
    #[cfg(feature = "dpdk")]
    tap();
}
